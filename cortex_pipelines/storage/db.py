"""DuckDB access shaped by its one-process file lock.

Every access takes the file for one short transaction and lets it go, so the CLI, the sensor
(code server), runs and the UI can take turns on the same file. Taking the file and committing
retry on lock and write-conflict errors with jittered exponential backoff.

Each process keeps one in-memory DuckDB instance and ATTACHes the file to it for the length of a
transaction: starting an instance costs ~15 ms and closing a written file ~20 ms, while ATTACH and
DETACH cost ~2 ms together (a one-row write's whole transaction ~6 ms) and take and release the
same file lock.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
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
from cortex_pipelines.storage import backup, health
from cortex_pipelines.storage.migrations import MIGRATIONS

log = logging.getLogger(__name__)


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
    wait=wait_random_exponential(multiplier=0.02, max=0.1),
    stop=stop_after_delay(60),
    reraise=True,
)


def _written(path: Path) -> tuple:
    """What changes when a process writes the file (a checkpoint rewrites blocks in place)."""
    info = path.stat()
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


_migrated: set[Path] = set()
_migrate_lock = threading.Lock()

# `run_unchanged` keeps a read only once the file's state is this old: a file system's clock ticks
# coarsely (a jiffy; a second or two on some), and a second write within the tick of the first may
# leave the file's size and times as they were.
SETTLED_S = 2.0
UNCHANGED_READS_KEPT = 32
_unchanged_reads: OrderedDict[tuple, tuple[tuple, object]] = OrderedDict()
_unchanged_lock = threading.Lock()


# A burst keeps the file between back-to-back transactions (a drain with a local model runs 4-5 per
# message within milliseconds), but lets it go after BURST_IDLE_S without a transaction (an LLM
# call, a sleep), after BURST_MAX_HOLD_S in all, and after the transaction in which another process
# signalled that it found the file locked (it touches `<file>.waiting`); in the last two cases it
# waits BURST_YIELD_S before taking the file again, so the sensor or a CLI command gets its turn.
BURST_MAX_HOLD_S = 0.5
BURST_IDLE_S = 0.02
BURST_YIELD_S = 0.03


@dataclass
class _Attachment:
    users: int = 0  # transactions running, plus one while a burst keeps the file
    bursts: int = 0  # bursts open on this file in this process
    kept_since: float | None = None  # monotonic
    kept_wall: float = 0.0  # the same instant on the wall clock, to compare with file times
    last_used: float = 0.0
    resume_at: float = 0.0


class _Host:
    """This process's in-memory DuckDB instance and the files attached to it (threads and nested
    transactions share one attachment)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.con = duckdb.connect(":memory:")
        self.lock = threading.Lock()
        self.files: dict[str, _Attachment] = {}

    def drop(self, alias: str, att: _Attachment) -> None:
        """One reference fewer (under self.lock); the last one detaches, which releases the lock."""
        att.users -= 1
        if att.users == 0:
            self.con.execute(f"DETACH {alias}")

    def unkeep(self, alias: str, att: _Attachment, now: float, *, yield_turn: bool) -> None:
        """A burst stops keeping the file (under self.lock)."""
        if att.kept_since is None:
            return
        if yield_turn:
            att.resume_at = now + BURST_YIELD_S
        att.kept_since = None
        self.drop(alias, att)


_host: _Host | None = None
_host_lock = threading.Lock()


def _current_host() -> _Host:
    """A forked child must not share its parent's instance."""
    global _host
    with _host_lock:
        if _host is None or _host.pid != os.getpid():
            _host = _Host()
        return _host


@atexit.register
def _close_host() -> None:
    """Close the instance before the interpreter tears its bindings down (files left attached get
    their checkpoint)."""
    global _host
    with _host_lock:
        if _host is not None and _host.pid == os.getpid():
            _host.con.close()
        _host = None


class Database:
    """A DuckDB file; each `transaction()` holds the file only while it runs (or a `burst()`)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._waiting = self.path.with_name(self.path.name + ".waiting")
        self._alias = "cortex_" + hashlib.sha1(str(self.path.absolute()).encode()).hexdigest()[:16]

    def _attachment(self, host: _Host) -> _Attachment:
        return host.files.setdefault(self._alias, _Attachment())

    @_retry_on_contention
    def _attach(self) -> _Host:
        host = _current_host()
        with host.lock:
            att = self._attachment(host)
            wait = att.resume_at - time.monotonic() if att.bursts and att.users == 0 else 0.0
        if wait > 0:
            time.sleep(wait)
        with host.lock:
            att = self._attachment(host)
            if att.users == 0:
                if not self.path.exists() and (gone := backup.lost(self.path)):
                    raise gone  # ATTACH would create an empty file in its place, in any process
                self.path.parent.mkdir(parents=True, exist_ok=True)
                quoted = str(self.path.absolute()).replace("'", "''")
                try:
                    host.con.execute(f"ATTACH '{quoted}' AS {self._alias}")
                except duckdb.IOException as exc:
                    if _is_contention(exc):
                        self._signal_waiting()
                    raise
                if att.bursts:
                    att.kept_since, att.kept_wall = time.monotonic(), time.time()
                    att.users += 1
            att.users += 1
        return host

    def _detach(self, host: _Host) -> None:
        with host.lock:
            att, now = self._attachment(host), time.monotonic()
            att.last_used = now
            host.drop(self._alias, att)
            if att.kept_since is not None and (
                now - att.kept_since >= BURST_MAX_HOLD_S or self._waited_since(att.kept_wall)
            ):
                host.unkeep(self._alias, att, now, yield_turn=True)

    def _signal_waiting(self) -> None:
        """Tell a process that keeps the file in a burst that someone waits for it."""
        with suppress(OSError):
            os.close(os.open(self._waiting, os.O_WRONLY | os.O_CREAT, 0o600))
            os.utime(self._waiting)

    def _waited_since(self, wall: float) -> bool:
        try:
            return os.stat(self._waiting).st_mtime >= wall
        except OSError:
            return False

    @contextmanager
    def burst(self) -> Iterator[None]:
        """Let consecutive transactions in this process share one attachment of the file, within
        the BURST_* bounds. Safe around slow work: an idle burst lets the file go."""
        host = _current_host()
        with host.lock:
            self._attachment(host).bursts += 1
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(host, done), daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()
            with host.lock:
                att = self._attachment(host)
                att.bursts -= 1
                if not att.bursts:
                    host.unkeep(self._alias, att, time.monotonic(), yield_turn=False)

    def _watch(self, host: _Host, done: threading.Event) -> None:
        """Let the file go while the burst's holder does something else (no transaction running)."""
        while not done.wait(BURST_IDLE_S / 2):
            with host.lock:
                att, now = self._attachment(host), time.monotonic()
                if att.kept_since is not None and att.users == 1 and now - att.last_used >= BURST_IDLE_S:
                    host.unkeep(self._alias, att, now, yield_turn=False)

    @contextmanager
    def _transaction_once(self) -> Iterator[duckdb.DuckDBPyConnection]:
        host = self._attach()
        try:
            con = host.con.cursor()
            try:
                con.execute(f"USE {self._alias}")
                con.execute("BEGIN TRANSACTION")
                yield con
                con.execute("COMMIT")
            except BaseException:
                with suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise
            finally:
                con.close()
        finally:
            self._detach(host)

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction; the caller must not hold it across slow work."""
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

    def settled(self) -> bool:
        """No process has written the file for SETTLED_S: a read `run_unchanged` keeps now will
        likely be asked again before the next write."""
        return self._state() is not None

    def _state(self) -> tuple | None:
        """What any process's commit changes: the file's and its write-ahead log's inode, size and
        times (a commit appends to the log, a checkpoint rewrites the file and drops the log).
        None while either was written in the last SETTLED_S."""
        settled_before = time.time_ns() - int(SETTLED_S * 1e9)
        state = []
        for path in (self.path, self._wal()):
            try:
                written = _written(path)
            except FileNotFoundError:
                written = None
            if written is not None and max(written[2], written[3]) > settled_before:
                return None
            state.append(written)
        return tuple(state)

    def run_unchanged(self, fn, *args):
        """`run(fn, *args)` for a read that is asked again and again (recall's, for every query):
        kept in this process and returned again, without taking the file, while no process has
        written the file since. `fn` and `args` are the key; the value is shared, never to be changed."""
        key = (self._alias, fn, args)
        state = self._state()  # before reading: a write meanwhile only means one more read
        kept = _unchanged_reads.get(key)
        if state is not None and kept is not None and kept[0] == state:
            return kept[1]
        value = self.run(fn, *args)
        if state is not None:
            with _unchanged_lock:
                _unchanged_reads[key] = (state, value)
                _unchanged_reads.move_to_end(key)
                while len(_unchanged_reads) > UNCHANGED_READS_KEPT:
                    _unchanged_reads.popitem(last=False)
        return value

    def query(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        return self.run(lambda con: con.execute(sql, params).fetchall())

    def query_dicts(self, sql: str, params: list | tuple = ()) -> list[dict]:
        def fetch(con):
            cur = con.execute(sql, params)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

        return self.run(fetch)

    def examine(self, fn, *args):
        """Run fn(con, ...) in a transaction without migrating first: `cortex doctor` looks at the
        file as it is, and must not change it."""

        @_retry_on_contention
        def attempt():
            with self._transaction_once() as con:
                return fn(con, *args)

        return attempt()

    def rewrite(self, wait_s: float = 30.0) -> None:
        """Copy every table into a fresh file and put it in the old one's place. DELETE leaves the
        rows' bytes in free blocks until DuckDB reuses them (compressed, so a grep may not even see
        them), and an erasure must not. The copy is swapped in under the file's lock, and only if no
        process wrote in between; raises backup.BackupError when other processes keep the file busy
        for `wait_s`."""
        self.migrate()
        fresh = self.path.with_name(f".{self.path.name}.rewrite-{os.getpid()}.tmp")
        deadline = time.monotonic() + wait_s
        try:
            while True:
                written = self._copy_into(fresh)
                with suppress(backup.BackupError), self._unattached_here(), backup.exclusive(self.path):
                    if _written(self.path) == written and not self._wal().exists():
                        os.replace(fresh, self.path)
                        return
                if time.monotonic() > deadline:
                    raise backup.BackupError(
                        f"{self.path} stayed in use; stop `cortex dev`, `cortex serve` and any running "
                        "command, then run `cortex erase --finish`"
                    )
                self._signal_waiting()
                time.sleep(random.uniform(0.05, 0.3))
        finally:
            fresh.unlink(missing_ok=True)
            fresh.with_name(fresh.name + ".wal").unlink(missing_ok=True)

    @contextmanager
    def _unattached_here(self) -> Iterator[None]:
        """Keep every thread of this process off the file while it is swapped; raises BackupError
        while one has it attached. backup.exclusive's lock cannot see such a holder (fcntl locks
        never conflict within a process), and its close would drop that holder's lock."""
        host = _current_host()
        with host.lock:
            if self._attachment(host).users:
                raise backup.BackupError(f"{self.path} is in use in this process")
            yield

    def _wal(self) -> Path:
        return self.path.with_name(self.path.name + ".wal")

    def _copy_into(self, fresh: Path) -> tuple:
        """COPY FROM DATABASE into `fresh` (schema, rows and sequence positions); returns the file's
        size and times as they were under this process's hold, to see later whether anyone wrote."""
        fresh.unlink(missing_ok=True)
        host = self._attach()
        try:
            con = host.con.cursor()
            try:
                quoted = str(fresh.absolute()).replace("'", "''")
                con.execute(f"CHECKPOINT {self._alias}")
                con.execute(f"ATTACH '{quoted}' AS {self._alias}_fresh")
                try:
                    con.execute(f"COPY FROM DATABASE {self._alias} TO {self._alias}_fresh")
                    con.execute(f"CHECKPOINT {self._alias}_fresh")
                finally:
                    con.execute(f"DETACH {self._alias}_fresh")
                return _written(self.path)
            finally:
                con.close()
        finally:
            self._detach(host)

    def back_up(self, label: str = "") -> Path:
        """A backup now, as the daily one is taken."""
        self.migrate()
        host = self._attach()
        try:
            con = host.con.cursor()
            try:
                return backup.take(con, self._alias, self.path, label)
            finally:
                con.close()
        finally:
            self._detach(host)

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
        host = self._attach()  # held across the backup and the migration: no other process writes
        try:
            self._back_up_if_due(host)
            self._migrate_schema()
        finally:
            self._detach(host)

    def _back_up_if_due(self, host: _Host) -> None:
        """Copy an existing database before a migration changes its schema, and once a day. Only the
        pre-migration copy is required: without it the migration does not run."""
        con = host.con.cursor()
        try:
            con.execute(f"USE {self._alias}")
            current, latest = health.schema_version(con), MIGRATIONS[-1][0]
            if not current:
                return  # a new database: nothing to keep
            if current < latest:
                backup.take(con, self._alias, self.path, f"-pre-v{latest}")
            elif backup.due(self.path):
                try:
                    backup.take(con, self._alias, self.path)
                except backup.BackupError as exc:
                    log.warning("the daily DuckDB backup failed: %s", exc)
                except (OSError, duckdb.Error) as exc:
                    if not health.is_disk_full(exc):  # said by the write that fails next, or by doctor
                        log.warning("the daily DuckDB backup failed: %s", health.one_line(exc))
        finally:
            con.close()

    def _migrate_schema(self) -> None:
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
