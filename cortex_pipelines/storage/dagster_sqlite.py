"""Erased text in this instance's Dagster storage: run records and tags, event logs (asset previews,
log lines), sensor ticks and compute logs under $CORTEX_HOME/dagster_home.

The shipped dagster.yaml keeps all of it in SQLite files (history/runs.db, an index and one event
log per run under history/runs/, schedules/schedules.db) and plain files (storage/). Rows and files
that hold a probe word of the erased texts are read; each line that carries erased text is replaced
(an event keeps its place, so run history and asset lineage keep their shape); a database that held
any is VACUUMed, so its free pages keep no copy. Storage configured elsewhere (Postgres) is reported
as not cleaned.

`history_size` measures the run history on disk for `cortex status`; run-history retention itself
is storage/run_history.py. `open_instance` is how Cortex opens the instance.
"""

from __future__ import annotations

import fcntl
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import yaml

from cortex_pipelines.files import write_atomic

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from cortex_pipelines.admin.redaction import Redactor

_SQLITE = b"SQLite format 3\x00"
_STORAGE_KEYS = ("storage", "run_storage", "event_log_storage", "schedule_storage")
_BUSY_MS = 30_000
_RUN_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@contextmanager
def open_instance(dagster_home: Path) -> Iterator[DagsterInstance]:
    """This home's Dagster instance, opened under an flock. The first open of a home creates and
    migrates its SQLite storage (alembic): two commands doing it at once crashed, one with "table
    alembic_version already exists", or both, leaving a version table with two heads that no later
    open could read. A home that cannot take the lock file (read-only) can take no storage either."""
    from dagster import DagsterInstance

    try:
        lock = open(dagster_home / "cortex-storage.lock", "a", encoding="utf-8")  # noqa: SIM115 (closed below)
    except OSError:
        lock = None
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as it closes, by the kernel if we die
        instance = DagsterInstance.from_config(str(dagster_home))
    finally:
        if lock is not None:
            lock.close()
    with instance:
        engines = _keep_event_log_connections(instance)
        try:
            yield instance
        finally:
            for engine in engines.values():
                engine.dispose()  # the kept connections close; SQLite checkpoints each WAL


def _keep_event_log_connections(instance: DagsterInstance) -> dict:
    """Let the instance's SQLite event log keep one SQLAlchemy engine, and one open connection, per
    database file while the instance is open. Dagster's own builds an engine and opens a connection
    for every read and write: a one-message `cortex run` made ~500, and closing each (the last
    connection to a WAL file checkpoints it) cost more than the queries. A kept connection is given
    out again only while its path names the file it opened (same device and inode): a run's file
    deleted meanwhile (run-history retention in another process) is opened afresh, as before."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
    from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
    from sqlalchemy import create_engine, event
    from sqlalchemy.exc import DisconnectionError
    from sqlalchemy.pool import QueuePool

    storage = instance.event_log_storage
    engines = {}
    if type(storage) is not SqliteEventLogStorage:
        return engines  # storage configured elsewhere: its own connection handling
    _kept[storage] = engines

    def engine_for(shard: str):
        path = storage.path_for_shard(shard)
        engine = create_engine(
            storage.conn_string_for_shard(shard),
            poolclass=QueuePool,
            pool_size=1,  # used by one thread at a time, under Dagster's lock
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
        )

        @event.listens_for(engine, "connect")
        def opened(dbapi_connection, record):
            record.info["file"] = _file_identity(path)

        @event.listens_for(engine, "checkout")
        def given_out(dbapi_connection, record, proxy):
            if record.info.get("file") != _file_identity(path):
                raise DisconnectionError(f"{path} is no longer the file this connection opened")

        return engine

    @contextmanager
    def connect(shard: str):
        with storage._db_lock:  # as Dagster's own _connect: one connection at a time
            engine = engines.get(shard)
            if engine is None:
                engine = engines[shard] = engine_for(shard)
            if shard not in storage._initialized_dbs:
                storage._initdb(engine)
                storage._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    storage._connect = connect
    return engines


_kept: WeakKeyDictionary = WeakKeyDictionary()  # event-log storage -> its kept engines, by shard


def let_go(storage, shard: str) -> None:
    """Close the connection kept to a run's event-log file, before its files are deleted."""
    engine = _kept.get(storage, {}).pop(shard, None)
    if engine is not None:
        engine.dispose()


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def live_runs(dagster_home: Path) -> list[str]:
    """Runs of this instance in flight now (runs whose process died are failed first): one could
    write a preview of a message while it is being erased."""
    if not (dagster_home / "dagster.yaml").is_file():
        return []
    from dagster import RunsFilter

    from cortex_pipelines.lanes import IN_FLIGHT, reap_dead_runs

    with open_instance(dagster_home) as instance:
        reap_dead_runs(instance)
        return [run.run_id for run in instance.get_runs(filters=RunsFilter(statuses=IN_FLIGHT))]


def daemon_last_reported(dagster_home: Path) -> float | None:
    """Seconds since this instance's Dagster daemon (started by `cortex dev`) last reported, or None
    when none has (or `cortex dev` cleared its reports on stopping): an idle `cortex dev` holds no
    run and no file open, yet its sensors start runs at any moment."""
    if not (dagster_home / "dagster.yaml").is_file():
        return None
    with open_instance(dagster_home) as instance:
        beats = instance.get_daemon_heartbeats().values()
    return time.time() - max(beat.timestamp for beat in beats) if beats else None


def clear_daemon_reports(dagster_home: Path) -> None:
    """Forget the daemon's reports once `cortex dev` has stopped, so nothing waits for them to age."""
    if not (dagster_home / "dagster.yaml").is_file():
        return
    from sqlalchemy.exc import SQLAlchemyError

    with suppress(SQLAlchemyError, sqlite3.Error), open_instance(dagster_home) as instance:
        instance.wipe_daemon_heartbeats()


def history_size(dagster_home: Path) -> dict[str, int]:
    """The run history on disk, from the file system alone (no Dagster import, no database open):
    runs with an event log (history/runs/<run_id>.db) and the bytes of history/ and of the compute
    logs under storage/. What run-history retention (storage/run_history.py) keeps in check."""
    shards = dagster_home / "history" / "runs"
    runs = sum(1 for p in shards.glob("*.db") if _RUN_ID.match(p.stem)) if shards.is_dir() else 0
    return {
        "runs": runs,
        "bytes": _tree_size(dagster_home / "history") + _tree_size(dagster_home / "storage"),
    }


def _tree_size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with suppress(FileNotFoundError):  # a file deleted while we walk
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def elsewhere(dagster_home: Path) -> str | None:
    """The storage dagster.yaml names when it is not the default SQLite files, else None."""
    config_file = dagster_home / "dagster.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else None
    for key in _STORAGE_KEYS:
        value = (config or {}).get(key)
        if value and "sqlite" not in str(value).lower():
            return f"{key} in {config_file}"
    return None


def clean(dagster_home: Path, redactor: Redactor) -> dict[str, int]:
    """Redact erased text in every SQLite database and plain file under dagster_home; counts of
    rows and files changed and databases vacuumed."""
    counts = {"dagster_rows": 0, "dagster_files": 0, "dagster_vacuumed": 0}
    if not redactor or not dagster_home.is_dir():
        return counts
    for path in sorted(p for p in dagster_home.rglob("*") if p.is_file() and not p.is_symlink()):
        if path.name.endswith(("-wal", "-shm", "-journal")):
            continue  # folded into their database by the VACUUM below
        with path.open("rb") as fh:
            head = fh.read(len(_SQLITE))
        if head == _SQLITE:
            raw = b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.is_file())
            if redactor.might_hold(raw):
                counts["dagster_rows"] += _clean_database(path, redactor)
                counts["dagster_vacuumed"] += 1
        elif redactor.might_hold(data := path.read_bytes()):
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue  # not text Cortex or Dagster writes
            redacted, changed = redactor.redact(text)
            if changed:
                write_atomic(path, redacted)
                counts["dagster_files"] += 1
    return counts


def _clean_database(path: Path, redactor: Redactor) -> int:
    changed = 0
    with closing(sqlite3.connect(path, timeout=_BUSY_MS / 1000, isolation_level=None)) as con:
        con.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
        tables = [
            r[0]
            for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                "AND sql NOT LIKE '%WITHOUT ROWID%'"
            )
        ]
        con.execute("BEGIN IMMEDIATE")
        try:
            for table in tables:
                for column in [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]:
                    changed += _clean_column(con, table, column, redactor)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("VACUUM")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return changed


def _clean_column(con: sqlite3.Connection, table: str, column: str, redactor: Redactor) -> int:
    probes = redactor.probes
    where = f"typeof(\"{column}\") = 'text'"
    if probes is not None:
        where += " AND (" + " OR ".join(f'instr(lower("{column}"), ?) > 0' for _ in probes) + ")"
    changed = 0
    rows = con.execute(f'SELECT rowid, "{column}" FROM "{table}" WHERE {where}', probes or []).fetchall()
    for rowid, value in rows:
        redacted, count = redactor.redact_serialized(value)
        if count:
            con.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', [redacted, rowid])
            changed += 1
    return changed
