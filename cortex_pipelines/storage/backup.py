"""Rolling backups of the DuckDB file, and bringing one back.

DuckDB is the only store that cannot be rebuilt from another (LanceDB, the snapshots and the
published files all derive from it), so the file is copied before a migration changes its schema
and once a day, into `$CORTEX_HOME/backups/cortex-<UTC stamp>[-pre-v<N>].duckdb`, user-only, the
newest `backup_keep` kept. A copy is taken by the process that holds the file (DuckDB's one-process
lock), right after a CHECKPOINT folds the write-ahead log in, so its bytes are one consistent state.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from cortex_pipelines.config import ConfigError, Settings, load_settings
from cortex_pipelines.storage import health

_NAME = re.compile(r"^cortex-(\d{8}T\d{6}Z)(?:-pre-v\d+)?\.duckdb$")
_STALE_TEMPORARY_S = 3600


class BackupError(Exception):
    """A backup cannot be taken, found or brought back; the message is one line."""


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
    return sorted(found, key=lambda p: p.name, reverse=True)


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


def _write_copy(source: Path, temporary: Path) -> None:
    """Copy the bytes, user-only, flushed to disk."""
    with (
        open(source, "rb") as src,
        os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as dst,
    ):
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
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
        _opens(con, temporary)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    keep = _keep(db_path)
    for old in backups(db_path)[keep:]:
        old.unlink(missing_ok=True)
    for leftover in folder(db_path).glob(".*.tmp"):  # a copy whose process was killed
        if time.time() - leftover.stat().st_mtime > _STALE_TEMPORARY_S:
            leftover.unlink(missing_ok=True)
    return target


def _opens(con, path: Path) -> None:
    """The copy opens and has a schema: a cheap check, as its bytes are a checkpointed file's under
    its lock (`verify`, which reads every row, runs where a backup is chosen and by doctor)."""
    quoted = str(path).replace("'", "''")
    con.execute(f"ATTACH '{quoted}' AS cortex_backup_check (READ_ONLY)")
    try:
        con.execute("SELECT max(version) FROM cortex_backup_check.schema_version").fetchone()
    finally:
        con.execute("DETACH cortex_backup_check")


def verify(path: Path) -> int:
    """Read every row of a backup (a damaged block fails its checksum); its schema version."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        health.table_scan(con)
        return health.schema_version(con)
    finally:
        con.close()


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
    """Hold the lock DuckDB takes on the file (an fcntl write lock), so no process can open it
    while it is swapped; fail at once when one has it open."""
    try:
        fd = os.open(db_path, os.O_RDWR)
    except FileNotFoundError:
        yield
        return
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
    """Delete every backup and every file `restore` kept aside (with its write-ahead log): after an
    erasure they are the only copies still holding the erased rows. Returns how many went."""
    gone = backups(db_path) + list(db_path.parent.glob(f"{db_path.name}.damaged-*"))
    gone += list(folder(db_path).glob(".*.tmp")) if folder(db_path).is_dir() else []
    for path in gone:
        path.unlink(missing_ok=True)
    return len(gone)


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
