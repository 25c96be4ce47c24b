"""DuckDB access shaped by its one-process file lock.

Every access opens a connection, runs one short transaction and closes it, so the CLI, the
sensor (code server), runs and the UI can take turns on the same file. Opening and committing
retry on lock and write-conflict errors with jittered exponential backoff.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path

import duckdb
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from cortex_pipelines import clock
from cortex_pipelines.storage.migrations import MIGRATIONS


def utcnow() -> datetime:
    """Naive UTC from the instance clock: the database stores TIMESTAMP columns in UTC."""
    return clock.now().replace(tzinfo=None)


def _is_contention(exc: BaseException) -> bool:
    text = str(exc).lower()
    if isinstance(exc, duckdb.IOException):
        return "lock" in text
    if isinstance(exc, duckdb.TransactionException):
        return "conflict" in text
    return False


_retry_on_contention = retry(
    retry=retry_if_exception(_is_contention),
    wait=wait_random_exponential(multiplier=0.02, max=1.0),
    stop=stop_after_delay(60),
    reraise=True,
)

_migrated: set[Path] = set()
_migrate_lock = threading.Lock()


class Database:
    """A DuckDB file; each `transaction()` is one short-lived connection."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @_retry_on_contention
    def _open(self) -> duckdb.DuckDBPyConnection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return duckdb.connect(str(self.path))

    @contextmanager
    def _transaction_once(self) -> Iterator[duckdb.DuckDBPyConnection]:
        con = self._open()
        try:
            con.execute("BEGIN TRANSACTION")
            yield con
            con.execute("COMMIT")
        except BaseException:
            with suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
        finally:
            con.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction on a fresh connection; the caller must not hold it across slow work."""
        self.migrate()
        with self._transaction_once() as con:
            yield con

    def run(self, fn, *args, **kwargs):
        """Run fn(con, ...) in a transaction, retrying the whole unit on lock or write conflicts."""

        @_retry_on_contention
        def attempt():
            with self.transaction() as con:
                return fn(con, *args, **kwargs)

        return attempt()

    def query(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        return self.run(lambda con: con.execute(sql, params).fetchall())

    def query_dicts(self, sql: str, params: list | tuple = ()) -> list[dict]:
        def fetch(con):
            cur = con.execute(sql, params)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

        return self.run(fetch)

    def query_polars(self, sql: str, params: list | tuple = ()):
        return self.run(lambda con: con.execute(sql, params).pl())

    def schema_version(self) -> int:
        return self.query("SELECT max(version) FROM schema_version")[0][0] or 0

    def migrate(self) -> None:
        """Apply pending migrations once per process; a database from an older version opens."""
        if self.path in _migrated:
            return
        with _migrate_lock:
            if self.path in _migrated:
                return
            _retry_on_contention(self._apply_migrations)()
            _migrated.add(self.path)

    def _apply_migrations(self) -> None:
        with self._transaction_once() as con:
            con.execute(
                "CREATE TABLE IF NOT EXISTS schema_version "
                "(version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)"
            )
            current = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
            for version, statements in MIGRATIONS:
                if version <= current:
                    continue
                for statement in statements:
                    con.execute(statement)
                con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, utcnow()])
