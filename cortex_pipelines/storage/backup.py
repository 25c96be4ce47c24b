"""Rolling backups of the DuckDB file, and bringing one back.

DuckDB is the only store that cannot be rebuilt from another (LanceDB, the snapshots and the
published files all derive from it), so the file is copied before a migration changes its schema
and once a day, into `$CORTEX_HOME/backups/cortex-<UTC stamp>[-pre-v<N>].duckdb`, user-only, the
newest `backup_keep` kept. A history import is copied once it is in (`-after-import`): nothing else
holds its messages, and the day's backup was taken before it. A copy is taken by the process that
holds the file (DuckDB's one-process lock), right after a CHECKPOINT folds the write-ahead log in,
so its bytes are one consistent state; it is kept only if every row of it reads, so a damaged file
never pushes a good backup out. That process never opens the file itself: the bytes are read by a
child process (`_write_copy`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from cortex_pipelines.config import ConfigError, Paths, Settings, load_settings
from cortex_pipelines.storage import health

AFTER_IMPORT = "-after-import"
_NAME = re.compile(rf"^cortex-(\d{{8}}T\d{{6}}Z)(?:-pre-v\d+|{AFTER_IMPORT})?\.duckdb$")
_REPLY_FILE = re.compile(r"^(\d+)\.json$")
ROLLED_BACK = ".rolled-back-"
_STALE_TEMPORARY_S = 3600


class BackupError(Exception):
    """A backup cannot be taken, found or brought back; the message is one line."""


class NoSuchBackup(BackupError):
    """The backup the user named is not there: bad input (exit 2), not a failure of the stores."""


def folder(db_path: Path) -> Path:
    return db_path.parent / "backups"


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def backups(db_path: Path) -> list[Path]:
    """Backups of this file, newest first (the stamp sorts by time)."""
    try:
        found = [p for p in folder(db_path).iterdir() if _NAME.match(p.name)]
    except FileNotFoundError:
        return []
    return sorted(found, key=_taken, reverse=True)


def _taken(backup: Path) -> tuple[str, bool, str]:
    """When a backup was taken: its stamp, then its kind, as a second may hold two (the day's
    backup before an import and the one after it, whose name sorts first)."""
    return _NAME.match(backup.name).group(1), backup.name.endswith(f"{AFTER_IMPORT}.duckdb"), backup.name


def taken_at(backup: Path) -> datetime:
    """When a backup was taken (UTC): its stamp, or for a copy of the user's own its file's time."""
    if name := _NAME.match(backup.name):
        return datetime.strptime(name.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return datetime.fromtimestamp(backup.stat().st_mtime, UTC)


def due(db_path: Path) -> bool:
    """No backup was taken today (UTC)."""
    newest = backups(db_path)
    return not newest or not _NAME.match(newest[0].name).group(1).startswith(_stamp()[:8])


def _keep(db_path: Path) -> int:
    """The `backup_keep` setting of the instance the file belongs to (read only when backing up)."""
    try:
        return load_settings(db_path.parent).backup_keep
    except ConfigError:  # the command says so itself; backups keep the default meanwhile
        return Settings.model_fields["backup_keep"].default


# The child that reads the file being copied: stdlib only, isolated. An OSError is reported on
# stderr as its errno, file (none: writing the copy failed) and message, with exit status _REPORTED.
_REPORTED = 3
_COPY_TO_STDOUT = f"""
import shutil, sys
try:
    with open(sys.argv[1], "rb") as src, open(sys.stdout.fileno(), "wb", closefd=False) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
except OSError as exc:
    print(exc.errno or 0, exc.filename or "", exc.strerror or exc, sep="\\t", file=sys.stderr)
    sys.exit({_REPORTED})
"""


def _write_copy(source: Path, temporary: Path) -> None:
    """Copy the bytes, user-only, flushed to disk, read by a child process: the database file is
    copied by the process that holds it, and closing any descriptor of a file drops every fcntl lock
    the process has on it, DuckDB's included. Another process could then take the file while this
    one still has it attached, and whichever checkpoints last overwrites the other's commits (the
    day's first command lost the inbox rows the sensor committed meanwhile)."""
    with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as dst:
        try:
            child = subprocess.run(
                [sys.executable, "-I", "-S", "-c", _COPY_TO_STDOUT, os.fspath(source)],
                stdin=subprocess.DEVNULL,
                stdout=dst,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
        except OSError as exc:  # no interpreter to start: not the file's fault
            raise BackupError(f"no Python could be started to copy {source}: {exc}") from None
        if child.returncode == _REPORTED and (said := child.stderr.strip()).count("\t") >= 2:
            code, name, why = said.split("\t", 2)
            raise OSError(int(code) or errno.EIO, why, name or os.fspath(temporary))
        if child.returncode:
            said = child.stderr.strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
            raise BackupError(f"copying {source} failed: {said[0]}")
        os.fsync(dst.fileno())


def take(con, alias: str, db_path: Path, label: str = "") -> Path:
    """Back up the file attached to `con` as `alias`; the caller holds it and nothing else in this
    process writes to it meanwhile. Older backups beyond `backup_keep` are removed."""
    target = folder(db_path) / f"cortex-{_stamp()}{label}.duckdb"
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    need = 2 * db_path.stat().st_size
    if shutil.disk_usage(target.parent).free < need:  # the last free bytes belong to DuckDB's own writes
        raise OSError(errno.ENOSPC, f"a backup needs {need} bytes free", str(target.parent))
    con.execute(f"CHECKPOINT {alias}")
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        _write_copy(db_path, temporary)
        _reads_whole(temporary, db_path)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    if label == AFTER_IMPORT:
        for earlier in _superseded(target):
            earlier.unlink(missing_ok=True)
    keep = _keep(db_path)
    for old in backups(db_path)[keep:]:
        old.unlink(missing_ok=True)
    for leftover in folder(db_path).glob(".*.tmp"):  # a copy whose process was killed
        if time.time() - leftover.stat().st_mtime > _STALE_TEMPORARY_S:
            leftover.unlink(missing_ok=True)
    return target


def _superseded(target: Path) -> list[Path]:
    """The same day's earlier copies after an import: this one holds their rows too, and a day of
    imports (a file per chat) would otherwise push every older day's backup out."""
    day = _NAME.match(target.name).group(1)[:8]
    return [
        p
        for p in target.parent.glob(f"cortex-{day}T*{AFTER_IMPORT}.duckdb")
        if p != target and _NAME.match(p.name)
    ]


def _reads_whole(copy: Path, db_path: Path) -> None:
    """Every row of the copy reads (about 60 ms at 6,000 rows): a damaged block of the file is
    copied with it, and the read commands that still answer would otherwise keep a copy each day
    and rotate the good backups out. Read in an instance of its own, which a damaged file cannot
    invalidate."""
    try:
        verify(copy)
    except duckdb.Error as exc:
        damage = health.as_store_damaged(exc, Paths(db_path.parent))
        why = damage.reason if damage else f"does not read whole: {health.one_line(exc)}"
        raise BackupError(
            f"{db_path} {why}, so the copy was not kept and no older backup was removed; "
            "`cortex doctor` says how to repair it"
        ) from exc


def examine(path: Path, fn, *args):
    """fn(con, *args) on a file no process holds (a backup, the file a restore replaces), read-only."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return fn(con, *args)
    finally:
        con.close()


def _read_every_row(con) -> int:
    health.table_scan(con)
    return health.schema_version(con)


def verify(path: Path) -> int:
    """Read every row of a backup (a damaged block fails its checksum); its schema version."""
    return examine(path, _read_every_row)


def newest_good(db_path: Path) -> Path:
    for candidate in backups(db_path):
        try:
            verify(candidate)
        except (duckdb.Error, OSError):
            continue
        return candidate
    raise BackupError(f"no readable backup in {folder(db_path)}")


@contextmanager
def exclusive(db_path: Path) -> Iterator[None]:
    """Hold the lock DuckDB takes on the file (an fcntl write lock), so no other process can open it
    while it is swapped; fail at once when one has it open. It cannot see a holder in this process
    (fcntl locks never conflict within one), and its close drops that holder's lock: the caller
    makes sure nothing here has the file attached (Database._unattached_here)."""
    try:
        fd = os.open(db_path, os.O_RDWR)
    except FileNotFoundError:
        yield
        return
    except PermissionError:
        raise BackupError(str(health.not_permitted(db_path, "the DuckDB database"))) from None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise BackupError(
                f"{db_path} is open in another process; stop `cortex dev`, `cortex serve` and any "
                "running command, then try again"
            ) from None
        yield
    finally:
        os.close(fd)


def discard_copies(db_path: Path) -> int:
    """Delete every backup and every file `restore` kept aside (with its write-ahead log, and the
    outbox files of rolled-back replies): after an erasure they are the only copies still holding
    the erased rows. Returns how many went."""
    gone = backups(db_path) + list(db_path.parent.glob(f"{db_path.name}.damaged-*"))
    gone += list(folder(db_path).glob(".*.tmp")) if folder(db_path).is_dir() else []
    rolled_back = list(Paths(db_path.parent).outbox.glob(f"{ROLLED_BACK}*"))
    gone += [p for aside in rolled_back for p in aside.rglob("*") if p.is_file()]
    for path in gone:
        path.unlink(missing_ok=True)
    for aside in rolled_back:
        shutil.rmtree(aside)
    return len(gone)


def lost(db_path: Path) -> health.StoreDamaged | None:
    """The file is missing from a home that held one; None for a new home. A home held one when it
    has what only a database with rows leaves, and Cortex never prunes: a backup (the day's second
    process takes one), a LanceDB table, a reply file in outbox/, a message file in inbox/.ingested/.
    A new empty file there would answer from vectors of messages it does not have, reuse the outbox's
    file names and, backed up the next day, push the good backups out."""
    paths = Paths(db_path.parent)
    found = backups(db_path)
    if not (
        found
        or any(paths.lance.glob("*.lance"))
        or _holds_a_file(paths.outbox)
        or _holds_a_file(paths.ingested)
    ):
        return None
    repair = (
        health.RESTORE
        if found
        else f"{health.RESTORE} COPY with a copy of your own ({folder(db_path)} has none)"
    )
    return health.StoreDamaged(
        "the DuckDB database", db_path, "is missing, though this home held one", repair
    )


def _holds_a_file(tree: Path) -> bool:
    return any(p.is_file() for p in tree.rglob("*"))


def set_aside_replies(outbox: Path, kept: dict[int, datetime]) -> tuple[int, Path]:
    """Move each outbox/<channel>/<id>.json whose reply a restored file does not hold (by id and
    the time it was made: ids are taken again after a restore) into
    outbox/.rolled-back-<stamp>/<channel>/: the next replies take those ids again, and exporting
    one would overwrite a reply a connector may not have sent yet. Returns how many moved, and where."""
    aside, moved = outbox / f"{ROLLED_BACK}{_stamp()}", 0
    channels = (
        [c for c in outbox.iterdir() if c.is_dir() and not c.name.startswith(".")] if outbox.is_dir() else []
    )
    for channel in sorted(channels):
        for reply in sorted(channel.iterdir()):
            if (m := _REPLY_FILE.match(reply.name)) and kept.get(int(m.group(1))) != _made_at(reply):
                (aside / channel.name).mkdir(mode=0o700, parents=True, exist_ok=True)
                os.replace(reply, aside / channel.name / reply.name)
                moved += 1
    return moved, aside


def _made_at(reply: Path) -> datetime | None:
    """When an outbox file's reply was made (naive UTC, as DuckDB keeps it); None if unreadable."""
    try:
        made = json.loads(reply.read_text(encoding="utf-8"))["created_at"]
        return datetime.fromisoformat(made).replace(tzinfo=None)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def restore(db_path: Path, backup: Path) -> Path | None:
    """Bring a backup back in place of the file; the file it replaces (and its write-ahead log) is
    kept beside it as `<name>.damaged-<stamp>`, never deleted. Returns where it was kept, if there was one."""
    try:
        verify(backup)
    except (duckdb.Error, OSError) as exc:
        raise BackupError(f"{backup} is not a readable backup: {health.one_line(exc)}") from None
    aside, kept = db_path.with_name(f"{db_path.name}.damaged-{_stamp()}"), None
    staged = db_path.with_name(f".{db_path.name}.restoring.{os.getpid()}.tmp")
    try:
        _write_copy(backup, staged)
        with exclusive(db_path):
            if db_path.exists():
                os.link(db_path, aside)
                kept = aside
            wal = db_path.with_name(db_path.name + ".wal")
            if wal.exists():  # it belongs to the damaged file: replayed on the backup it would corrupt it
                os.replace(wal, aside.with_name(aside.name + ".wal"))
            os.replace(staged, db_path)  # the path is never missing, so no process creates a new file
    finally:
        staged.unlink(missing_ok=True)
    return kept
