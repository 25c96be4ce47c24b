"""Run-history retention (`CORTEX_RUN_HISTORY_DAYS`, 30 by default): Dagster keeps every run for
ever, and its `retention:` setting purges only sensor ticks. A run is its record and tags in
history/runs.db, its event log in history/runs/<run_id>.db (0.15-0.5 MB), its asset events
mirrored in history/runs/index.db, its asset-check executions there too, and its compute logs
under storage/<run_id>/. A live instance makes some 40-80 runs a day (a processing run per
conversation, the automation sensor's hourly run while memory changes, extraction every few
turns), so a year of them is gigabytes and the UI's run list grows without end.

`prune_runs` deletes finished runs (success, failure, canceled) that ended before a cutoff, with
all of the above, and never one that is still needed:

* a run not finished (queued, starting, started, canceling): a dead one is failed by lanes.py
  first, and pruned once it is old;
* the newest run of each job;
* a run that holds an asset's latest materialization, observation, failed or skipped
  materialization, its latest planned run, or the latest evaluation of an asset check. Dagster
  1.13's `delete_run` removes the run's events but leaves the asset's record (the `asset_keys`
  row, with its latest materialization and last run id) and the check's execution rows pointing
  at the deleted run: the asset's page would still show a materialization that its history no
  longer has, and `fetch_materializations` and the asset record would disagree.

Plain Python over a DagsterInstance: the `run_history_retention` sensor and `cortex run` call it.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dagster import AssetCheckKey, AssetKey, DagsterInstance, DagsterRunStatus, RunRecord, RunsFilter
from dagster._core.errors import DagsterError
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.local_compute_log_manager import LocalComputeLogManager
from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError

from cortex_pipelines.storage.dagster_sqlite import let_go

# Runs deleted by one call of the sensor or `cortex run` at most (about 15 ms each on 2 busy cores):
# a year of history from before retention goes in a day of hourly ticks, each well inside the
# sensor's 60 s timeout.
RUNS_PER_CALL = 1000
FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
# Dagster's run ids; a file or folder named otherwise (the runless events' shard, an IO manager's
# output) is never swept.
_RUN_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_SHARD_SUFFIXES = ("", "-wal", "-shm", "-journal")
# Runs past the cutoff looked at in one call beyond `limit` and the protected ones: room for the
# newest run of each job.
_SLACK = 100


@dataclass(frozen=True)
class Pruned:
    deleted: int = 0  # runs deleted, with their event logs and compute logs
    bytes_freed: int = 0  # per-run event-log files and compute logs removed from disk
    kept: int = 0  # finished runs past the cutoff kept: the newest of their job or holding a latest
    more: bool = False  # stopped at `limit`: the next call goes on
    stopped: str | None = None  # why it stopped early (a busy database): the next call goes on

    def describe(self, days: int) -> str:
        freed = f", {self.bytes_freed / 1_000_000:.1f} MB freed" if self.bytes_freed else ""
        more = "; more next time" if self.more else ""
        return f"pruned {self.deleted} run(s) older than {days} days from Dagster's run history{freed}{more}"


def prune_runs(instance: DagsterInstance, before: datetime, *, limit: int | None = None) -> Pruned:
    """Delete the finished runs that ended before `before` (aware), oldest first, at most `limit`,
    except the newest run of each job and the runs that hold an asset's or a check's latest."""
    cutoff = before.timestamp()
    held = holders_of_latest(instance)
    page = None if limit is None else limit + len(held) + _SLACK
    records = instance.get_run_records(
        filters=RunsFilter(statuses=FINISHED, updated_before=before),
        limit=page,
        order_by="update_timestamp",
        ascending=True,
    )
    newest: dict[str, str | None] = {}
    deleted = freed = kept = 0
    stopped = None
    for record in records:
        run = record.dagster_run
        if _ended(record) >= cutoff:
            continue
        if run.job_name not in newest:
            ids = instance.get_run_ids(filters=RunsFilter(job_name=run.job_name), limit=1)
            newest[run.job_name] = ids[0] if ids else None
        if run.run_id in held or run.run_id == newest[run.job_name]:
            kept += 1
            continue
        if limit is not None and deleted >= limit:
            return Pruned(deleted, freed, kept, more=True)
        try:
            freed += delete_run(instance, run.run_id)
        except (SQLAlchemyError, sqlite3.Error, OSError, DagsterError) as exc:
            stopped = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            break
        deleted += 1
    if stopped is None:
        freed += _sweep_orphans(instance, cutoff)
    return Pruned(deleted, freed, kept, stopped=stopped)


def holders_of_latest(instance: DagsterInstance) -> set[str]:
    """Runs that hold the latest of something an asset's page and the automation conditions read:
    a materialization, observation, failed or skipped materialization, a planned run, and each
    asset check's latest evaluation."""
    held: set[str] = set()
    for record in instance.get_asset_records():
        entry = record.asset_entry
        events = (
            entry.last_materialization_record,
            entry.last_observation_record,
            entry.last_failed_to_materialize_record,
            entry.last_skipped_materialize_record,
        )
        held.update(e.event_log_entry.run_id for e in events if e is not None)
        held.update(r for r in (entry.last_run_id, entry.last_planned_materialization_run_id) if r)
    checks = _check_keys(instance)
    if checks:
        latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(checks)
        held.update(execution.run_id for execution in latest.values())
    held.discard("")  # runless events (a sensor's reports) belong to no run
    return held


def delete_run(instance: DagsterInstance, run_id: str) -> int:
    """Delete one run everywhere Dagster keeps it; the bytes removed from disk."""
    storage = instance.event_log_storage
    shard = Path(storage.path_for_shard(run_id)) if isinstance(storage, SqliteEventLogStorage) else None
    logs = _compute_log_dir(instance, run_id)
    size = sum(_size(Path(f"{shard}{s}")) for s in _SHARD_SUFFIXES) if shard else 0
    size += _size(logs) if logs else 0
    instance.delete_run(run_id)  # the run and its tags, its events (its shard and the index)
    if isinstance(storage, SqlEventLogStorage) and storage.has_table("asset_check_executions"):
        with storage.index_connection() as conn:  # Dagster's delete_run leaves these
            conn.execute(
                delete(AssetCheckExecutionsTable).where(AssetCheckExecutionsTable.c.run_id == run_id)
            )
    with suppress(NotImplementedError):  # a compute log manager that cannot delete keeps them
        instance.compute_log_manager.delete_logs(prefix=[run_id])
    if shard is not None:  # delete_run empties the run's own database but leaves the file
        let_go(storage, run_id)
        for suffix in _SHARD_SUFFIXES:
            Path(f"{shard}{suffix}").unlink(missing_ok=True)
        getattr(storage, "_initialized_dbs", set()).discard(run_id)
    return size


def _ended(record: RunRecord) -> float:
    return record.end_time or record.update_timestamp.timestamp()


def _check_keys(instance: DagsterInstance) -> list[AssetCheckKey]:
    storage = instance.event_log_storage
    if not isinstance(storage, SqlEventLogStorage) or not storage.has_table("asset_check_executions"):
        return []
    table = AssetCheckExecutionsTable
    with storage.index_connection() as conn:
        rows = conn.execute(select(table.c.asset_key, table.c.check_name).distinct()).fetchall()
    return [AssetCheckKey(AssetKey.from_db_string(key), name) for key, name in rows if key]


def _compute_log_dir(instance: DagsterInstance, run_id: str) -> Path | None:
    manager = instance.compute_log_manager
    if not isinstance(manager, LocalComputeLogManager) or not _RUN_ID.match(run_id):
        return None
    return Path(manager._base_dir) / run_id  # where delete_logs(prefix=[run_id]) deletes


def _sweep_orphans(instance: DagsterInstance, cutoff: float) -> int:
    """Event-log files and compute-log folders of runs that no longer exist (a prune killed between
    deleting the run and its files), older than the cutoff."""
    storage = instance.event_log_storage
    places: list[Path] = []
    if isinstance(storage, SqliteEventLogStorage):
        places += [p for p in _files(Path(storage._base_dir)) if p.suffix == ".db"]
    if isinstance(instance.compute_log_manager, LocalComputeLogManager):
        places += [p for p in _files(Path(instance.compute_log_manager._base_dir)) if p.is_dir()]
    freed = 0
    for path in places:
        run_id = path.stem if path.suffix == ".db" else path.name
        if not _RUN_ID.match(run_id) or _mtime(path) >= cutoff or instance.has_run(run_id):
            continue
        if path.suffix == ".db":
            for suffix in _SHARD_SUFFIXES:
                candidate = Path(f"{path}{suffix}")
                freed += _size(candidate)
                candidate.unlink(missing_ok=True)
        else:
            freed += _size(path)
            instance.compute_log_manager.delete_logs(prefix=[run_id])
    return freed


def _files(folder: Path) -> Iterable[Path]:
    try:
        return list(folder.iterdir())
    except FileNotFoundError:
        return []


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder; 0 for what is not there."""
    try:
        if path.is_file():
            return path.stat().st_size
        total = 0
        for root, _dirs, files in os.walk(path):
            for name in files:
                with suppress(FileNotFoundError):  # deleted while we walk
                    total += os.lstat(os.path.join(root, name)).st_size
        return total
    except FileNotFoundError:
        return 0
