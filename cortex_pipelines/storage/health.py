"""What a damaged store looks like, and the read-only queries `cortex doctor` checks DuckDB with.

Storage libraries fail with their own exceptions (a DuckDB IOException, a lance RuntimeError, an
OSError from a full disk), each dozens of lines deep. `as_store_damaged` turns the ones that mean
"this store is damaged" (or unusable as it is: a full disk, a read-only file system, a file this user
may not write) into one StoreDamaged that names the store and the command that repairs it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from datetime import datetime
from pathlib import Path

import duckdb

from cortex_pipelines.config import Paths
from cortex_pipelines.storage.rows import dict_rows

RESTORE = "cortex doctor --restore"
REPAIR_VECTORS = "cortex doctor --repair-vectors"
FREE_SPACE = "free some space, then run the command again"
REMOUNT = "remount it read-write, then run the command again"
WAIT = "stop the process that holds it (`cortex dev`, `cortex serve`, a run), then run the command again"

# A bus message of a history imported with `cortex ingest --history`: stored completed, never
# attempted (every message answered live was claimed at least once). Here, as this module loads
# before the others of storage/.
IMPORTED_HISTORY = "source LIKE 'import:%' AND state = 'completed' AND attempts = 0"

# DuckDB's words for a file it cannot trust, and how to say it in a line.
_DUCKDB_DAMAGE = [
    (re.compile(r"not a valid DuckDB database", re.I), "is not a DuckDB file any more (overwritten?)"),
    (re.compile(r"Could not read enough bytes", re.I), "is cut short (truncated?)"),
    (re.compile(r"Corrupt database|checksum", re.I), "has a damaged block (checksum mismatch)"),
    (re.compile(r"database has been invalidated|Failed to load metadata|INTERNAL Error", re.I), None),
]
_DUCKDB_DAMAGE_TYPES = (
    duckdb.IOException,
    duckdb.SerializationException,
    duckdb.InternalException,
    duckdb.FatalException,
)
_LANCE_TABLE = re.compile(r"([A-Za-z0-9_-]+)\.lance\b")
_QUOTED_FILE = re.compile(r'"([^"]+)"')
# ENOSPC in the words of Python and DuckDB, lance (Rust) and SQLite (Dagster's run storage)
_DISK_FULL = ("no space left on device", "os error 28", "database or disk is full")
# SQLite may say only "disk I/O error" when its shared memory file cannot grow on a full disk
_NEARLY_FULL_BYTES = 16 * 1024 * 1024
# EROFS in the words of Python and DuckDB, lance (Rust)
_READ_ONLY = ("read-only file system", "os error 30")
# SQLite (Dagster's run storage) only says it cannot open or write its file
_SQLITE_CANNOT_WRITE = ("unable to open database file", "attempt to write a readonly database")
_RUST_SOURCE = re.compile(r",?\s*/\S+\.rs:\d+:\d+")


class StoreDamaged(Exception):
    """A store cannot be read or written; the message is one line with the repair command."""

    def __init__(self, store: str, path: Path, reason: str, repair_command: str):
        self.store, self.path, self.reason, self.repair_command = store, Path(path), reason, repair_command
        super().__init__(f"{store} {path} {reason}; to repair: {repair_command}")


def one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's first line without the Rust source location lance appends."""
    text = _RUST_SOURCE.sub("", str(exc)).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _chain(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    text = str(exc).lower()
    return any(words in text for words in _DISK_FULL)


def _full_below(exc: BaseException, home: Path) -> bool:
    """A SQLite I/O error on a disk with almost nothing free is the full disk."""
    if "disk i/o error" not in str(exc).lower():
        return False
    try:
        return shutil.disk_usage(home).free < _NEARLY_FULL_BYTES
    except OSError:
        return False


def on_read_only_file_system(path: Path) -> bool:
    """The file system holding `path` is mounted read-only (statvfs says so without writing)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _read_only(exc: BaseException, paths: Paths) -> StoreDamaged | None:
    """A write refused because the file system is mounted read-only: every byte is intact, so the
    repair is a remount (a restore cannot even write, and would replace an intact file)."""
    text = str(exc).lower()
    if not (
        (isinstance(exc, OSError) and exc.errno == errno.EROFS)
        or any(words in text for words in _READ_ONLY)
        or (any(words in text for words in _SQLITE_CANNOT_WRITE) and on_read_only_file_system(paths.home))
    ):
        return None
    named = exc.filename if isinstance(exc, OSError) and isinstance(exc.filename, str) else None
    if named is None and (quoted := _QUOTED_FILE.search(str(exc))):
        named = quoted.group(1)
    # the home, unless only a folder mounted inside it (or a file outside it) is read-only
    where = paths.home if named is None or on_read_only_file_system(paths.home) else Path(named)
    return read_only(where)


def read_only(path: Path) -> StoreDamaged:
    return StoreDamaged("the file system holding", path, "is read-only (nothing is damaged)", REMOUNT)


def is_lance_damage(exc: BaseException) -> bool:
    """A lance read or write that failed on the table's own files (a missing or damaged fragment,
    manifest or index), as opposed to a commit conflict that is retried."""
    text = str(exc).lower()
    return isinstance(exc, (OSError, RuntimeError, ValueError)) and (
        "lance error" in text or "lanceerror" in text
    )


def _duckdb_damage(exc: duckdb.Error) -> str | None:
    for pattern, reason in _DUCKDB_DAMAGE:
        if pattern.search(str(exc)):
            return reason or f"is damaged: {one_line(exc)}"
    return f"is damaged: {one_line(exc)}" if isinstance(exc, _DUCKDB_DAMAGE_TYPES) else None


def not_permitted(path: Path, store: str = "the file") -> StoreDamaged:
    """A file this user may not read or write, or cannot create: its mode is wrong, not its bytes,
    so the repair is chmod (a restore would replace an intact file)."""
    if os.path.lexists(path):
        return StoreDamaged(store, path, "is not readable and writable by this user", f"chmod u+rw {path}")
    return StoreDamaged(
        store,
        path,
        f"cannot be created: {path.parent} is not writable by this user",
        f"chmod u+rwx {path.parent}",
    )


def _denied(exc: BaseException, paths: Paths) -> StoreDamaged | None:
    if isinstance(exc, PermissionError):
        where = Path(exc.filename) if exc.filename else paths.home
        return not_permitted(where, "the folder" if os.path.isdir(where) else "the file")
    if isinstance(exc, duckdb.Error) and "permission denied" in str(exc).lower():
        named = _QUOTED_FILE.search(str(exc))
        return not_permitted(Path(named.group(1)) if named else paths.db, "the DuckDB database")
    return None


def as_store_damaged(exc: BaseException, paths: Paths) -> StoreDamaged | None:
    """The damaged store behind an exception (or anything it was raised from), else None."""
    for cause in _chain(exc):
        if isinstance(cause, StoreDamaged):
            return cause
        if read_only_fs := _read_only(cause, paths):
            return read_only_fs
        if is_disk_full(cause) or _full_below(cause, paths.home):
            return StoreDamaged("the disk holding", paths.home, "is full (nothing was lost)", FREE_SPACE)
        if denied := _denied(cause, paths):
            return denied
        if isinstance(cause, duckdb.IOException) and "lock" in str(cause).lower():
            return StoreDamaged("the DuckDB database", paths.db, f"is in use: {one_line(cause)}", WAIT)
        if isinstance(cause, duckdb.Error) and (reason := _duckdb_damage(cause)):
            return StoreDamaged("the DuckDB database", paths.db, reason, RESTORE)
        if is_lance_damage(cause):
            table = _LANCE_TABLE.search(str(cause))
            where = paths.lance / f"{table.group(1)}.lance" if table else paths.lance
            return StoreDamaged("the LanceDB table", where, f"is damaged: {one_line(cause)}", REPAIR_VECTORS)
    return None


def table_scan(con) -> dict[str, int]:
    """Rows per table, counted by reading every column of every row: a damaged block fails its
    checksum here (a plain count(*) reads only metadata)."""
    names = con.execute(
        "SELECT table_name FROM duckdb_tables() "
        "WHERE database_name = current_database() AND schema_name = 'main' ORDER BY 1"
    ).fetchall()
    counts = {}
    for (name,) in names:
        count, _ = con.execute(f'SELECT count(*), bit_xor(hash(t)) FROM "{name}" AS t').fetchone()
        counts[name] = int(count)
    return counts


def database_size(con) -> dict:
    rows = dict_rows(
        con.execute("SELECT * FROM pragma_database_size() WHERE database_name = current_database()")
    )
    return rows[0] if rows else {}


def schema_version(con) -> int:
    found = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND table_name = 'schema_version'"
    ).fetchone()[0]
    if not found:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]


def indexed_session_ids(con, cursor_name: str) -> tuple[set[int], set[int]]:
    """(ids the episodic table must hold: said up to its indexing cursor, silence excluded; every
    session id, so a LanceDB row for a message DuckDB does not have shows)."""
    rows = con.execute(
        "SELECT id, id <= coalesce((SELECT value FROM cursors WHERE name = ?), 0) AND content <> '[silence]' "
        "FROM session",
        [cursor_name],
    ).fetchall()
    return {i for i, due in rows if due}, {i for i, _ in rows}


def indexed_facts(con) -> tuple[dict[int, str], set[int]]:
    """(status of each fact whose LanceDB row is up to date, every fact id)."""
    rows = con.execute(
        "SELECT id, status, indexed_at IS NOT NULL AND indexed_at >= updated_at FROM facts"
    ).fetchall()
    return {i: status for i, status, fresh in rows if fresh}, {i for i, _, _ in rows}


def lease_holder(con, name: str) -> tuple[str, str, int] | None:
    """(holder, host, pid) of a lease's row, live or not (`lease.holder_alive` says which)."""
    return con.execute("SELECT holder, host, pid FROM brain_lease WHERE name = ?", [name]).fetchone()


def held(con) -> tuple[set[tuple[str, str]], dict[int, datetime]]:
    """What a restored backup holds: its messages by (channel, external id), and its replies' ids
    with when each was made. Not by ids alone: after an earlier restore, new messages and replies
    take ids again, and a second restore took theirs for the backup's (QA, helper-27)."""
    messages = set(con.execute("SELECT channel, external_id FROM bus").fetchall())
    return messages, dict(con.execute("SELECT id, created_at FROM outbox").fetchall())


def said_after(
    con, messages: set[tuple[str, str]], replies: dict[int, datetime]
) -> tuple[dict[str, int], dict[str, int], int]:
    """What a file holds that a backup (`held`) does not: messages by the inbox folder they came
    from ('' for the gateway, plain imports and schedules: no inbox file holds them), history
    imported with `cortex ingest --history` by the file's name (stored completed, never attempted),
    and replies."""
    folders: dict[str, int] = {}
    imported: dict[str, int] = {}
    for channel, external_id, folder, history_file in con.execute(
        "SELECT channel, external_id, "
        "CASE WHEN source LIKE 'inbox/%/%' THEN split_part(source, '/', 2) ELSE '' END, "
        f"CASE WHEN {IMPORTED_HISTORY} THEN substr(source, 8) END FROM bus"
    ).fetchall():
        if (channel, external_id) in messages:
            continue
        if history_file is not None:
            imported[history_file] = imported.get(history_file, 0) + 1
        else:
            folders[folder] = folders.get(folder, 0) + 1
    made = con.execute("SELECT id, created_at FROM outbox").fetchall()
    return folders, imported, sum(1 for reply_id, at in made if replies.get(reply_id) != at)
