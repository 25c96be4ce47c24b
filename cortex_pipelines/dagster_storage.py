"""Dagster's SQLite instance storage with one SQLAlchemy engine per database file.

Dagster's SQLite storages build a new engine for every connection they open: about 1,000 per
`cortex run`, each with an empty statement cache, so every event is compiled afresh. These
subclasses keep one engine per file. The engines keep NullPool, so each use still opens and closes
its own sqlite connection and nothing is held open between uses; the files, their layout under
DAGSTER_HOME and Dagster's behaviour are unchanged. The shipped dagster.yaml names them.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from dagster._config import Field, StringSource
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

# A long-lived webserver or daemon reads many runs' event files; the oldest engines are dropped.
MAX_ENGINES = 64

_engines: OrderedDict[tuple[str, int | None], Engine] = OrderedDict()
_engines_lock = threading.Lock()


def engine_for(conn_string: str, busy_timeout: int | None = None) -> Engine:
    """The one engine for this database file, made on first use."""
    key = (conn_string, busy_timeout)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            connect_args = {} if busy_timeout is None else {"timeout": busy_timeout}
            engine = _engines[key] = create_engine(conn_string, poolclass=NullPool, connect_args=connect_args)
            while len(_engines) > MAX_ENGINES:
                _engines.popitem(last=False)[1].dispose()
        else:
            _engines.move_to_end(key)
        return engine


def _base_dir(config_value: dict, *below: str) -> str:
    """Where Dagster's own default puts this storage: under DAGSTER_HOME."""
    if config_value.get("base_dir"):
        return config_value["base_dir"]
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise RuntimeError(
            "DAGSTER_HOME is not set: Dagster's storage needs it (cortex sets it; run through cortex)"
        )
    return os.path.join(home, *below)


_CONFIG = {"base_dir": Field(StringSource, is_required=False)}


class CortexRunStorage(SqliteRunStorage):
    """Runs, in $DAGSTER_HOME/history/runs.db."""

    @classmethod
    def config_type(cls):
        return _CONFIG

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(_base_dir(config_value, "history", ""), inst_data=inst_data)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with engine_for(self._conn_string).connect() as conn, conn.begin():
            yield conn


class CortexScheduleStorage(SqliteScheduleStorage):
    """Schedule and sensor state and ticks, in $DAGSTER_HOME/schedules/schedules.db."""

    @classmethod
    def config_type(cls):
        return _CONFIG

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(_base_dir(config_value, "schedules"), inst_data=inst_data)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with engine_for(self._conn_string).connect() as conn, conn.begin():
            yield conn


class CortexEventLogStorage(SqliteEventLogStorage):
    """Event logs, one file per run plus the index, in $DAGSTER_HOME/history/runs/."""

    @classmethod
    def config_type(cls):
        return _CONFIG

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(_base_dir(config_value, "history", "runs", ""), inst_data=inst_data)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = engine_for(self.conn_string_for_shard(shard), SQLITE_BUSY_TIMEOUT_SECONDS)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn
