"""Run lanes: which runs are in the brain lane, and keeping the lanes moving when a run dies
without its bookkeeping.

Every run that materializes session_messages is in the brain lane, however it was launched (a job,
a sensor, the UI's "Materialize all", the catalog): the shipped dagster.yaml limits the lane to one
run at a time by its tag, and run monitoring fails a brain-lane run past its max runtime.
BrainLaneRunCoordinator, the run coordinator that dagster.yaml names, tags every queued run so, and
asks a run lingering in the lane for messages to end when another brain-lane run is queued.

A SIGKILLed run never reports its own end: Dagster keeps its record STARTED (which the brain-lane
tag limit counts as busy) and its steps' pool slots claimed (which blocks every later run's step
in that pool). Every run of ours records its pid in an engine event ("Started process for run",
"Executing steps in process"), and a run that `cortex run` executes itself names its pid in a tag
from the moment it is created; so a run whose process is gone is failed here and its slots freed,
whether it was killed before its first event (left NOT_STARTED), mid-step, or while it lingered
for messages (brain/linger.py).

Dagster can also forget a live step waiting for a pool slot: a step that finds the pool full queues
itself in a second transaction, and a slot freed between the two is handed to nobody, so the step
waits for ever (in CI, one of two `cortex run`s started together on a fresh home hung so). Whatever
reaps dead runs also hands such a free slot on, and `cortex run` does it while its job runs.

Only runs on this machine can be judged by pid: with any launcher other than Dagster's default
(which runs every run on the code server's host) nothing is reaped, and run monitoring stays the
only safety net.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    Field,
    RunRecord,
    RunsFilter,
)
from dagster._core.launcher import DefaultRunLauncher
from dagster._core.run_coordinator import QueuedRunCoordinator, SubmitRunContext
from sqlalchemy.exc import SQLAlchemyError

from cortex_pipelines import processes
from cortex_pipelines.config import Paths, cortex_home
from cortex_pipelines.storage.lease import want_lane

BRAIN_ASSET = AssetKey("session_messages")
BRAIN_LANE = {"cortex/lane": "brain"}
MAX_RUNTIME_TAG = "dagster/max_runtime"
# Run monitoring (shipped dagster.yaml) fails a brain-lane run that runs longer than this: a hung
# run must not hold the lane forever. The brain lease's own timeout is shorter.
MAX_RUNTIME_S = 3600
BRAIN_RUN_TAGS = {**BRAIN_LANE, MAX_RUNTIME_TAG: str(MAX_RUNTIME_S)}
# A processing run that lingers for more messages (brain/linger.py) stops waiting after this long,
# well inside MAX_RUNTIME_S; the next message then starts a fresh run.
LINGER_LIMIT_S = MAX_RUNTIME_S // 2

PROCESSING_JOB = "process_messages"
# A brain-lane run in one of these states answers what arrives, or will once it leaves the queue:
# nobody asks for another one then.
ACTIVE = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
IN_FLIGHT = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
REAPABLE = [DagsterRunStatus.NOT_STARTED, *IN_FLIGHT]
# A run executed in a process of ours (`cortex run`) carries that process's pid from the moment
# it is created, before any event: killed then, it would stay NOT_STARTED, and in the brain lane
# that reads as a run about to answer, so no sensor would ever start another.
PID_TAG = "cortex/pid"
POLL_S = 0.5


def planned_assets(instance: DagsterInstance, run: DagsterRun) -> set[AssetKey]:
    """The assets a run will materialize, from its execution plan: a whole job, an asset selection
    and a re-execution of some steps alike."""
    if run.execution_plan_snapshot_id:
        return set(instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id).asset_selection)
    return set(run.asset_selection or ())


def brain_lane_tags(instance: DagsterInstance, run: DagsterRun) -> dict[str, str]:
    """The tags a run lacks to be in the brain lane: none unless it materializes session_messages.
    A max runtime the run already names is kept."""
    if BRAIN_ASSET not in planned_assets(instance, run):
        return {}
    wanted = BRAIN_LANE if MAX_RUNTIME_TAG in run.tags else BRAIN_RUN_TAGS
    return {key: value for key, value in wanted.items() if run.tags.get(key) != value}


class BrainLaneRunCoordinator(QueuedRunCoordinator):
    """Dagster's queued run coordinator, which first puts a run that materializes session_messages
    in the brain lane (jobs carry the tags themselves; an ad-hoc asset selection does not), and
    whose dequeue interval may be a fraction of a second (the first message after idle waits for
    it; Dagster's field takes whole seconds, the daemon's loop any interval)."""

    def __init__(self, dequeue_interval_seconds: float | None = None, **kwargs):
        super().__init__(**kwargs)
        if dequeue_interval_seconds is not None:
            self._dequeue_interval_seconds = dequeue_interval_seconds

    @classmethod
    def config_type(cls):
        return {
            **super().config_type(),
            "dequeue_interval_seconds": Field(
                float, is_required=False, description="How often the daemon looks at the run queue."
            ),
        }

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        if missing := brain_lane_tags(self._instance, run):
            self._instance.add_run_tags(run.run_id, missing)
            run = self._instance.get_run_by_id(run.run_id) or run
        if run.tags.get("cortex/lane") == BRAIN_LANE["cortex/lane"] and self._lane_taken_by_another(run):
            # A processing run lingering for messages (brain/linger.py) ends now: the UI's
            # "Materialize all" or a launch of cortex_main waited out its idle window in the queue.
            want_lane(Paths(cortex_home()).db)
        return super().submit_run(context._replace(dagster_run=run))

    def _lane_taken_by_another(self, run: DagsterRun) -> bool:
        others = self._instance.get_runs(filters=RunsFilter(tags=BRAIN_LANE, statuses=IN_FLIGHT), limit=2)
        return any(other.run_id != run.run_id for other in others)


@dataclass(frozen=True)
class DeadRun:
    run_id: str
    job_name: str
    pid: int

    def describe(self) -> str:
        return f"run {self.run_id[:8]} ({self.job_name}, pid {self.pid}) died: marked failed, its slots freed"


def in_process_tags() -> dict[str, str]:
    """Tags for a run this process executes itself, so it can be judged dead before its first event."""
    return {PID_TAG: str(os.getpid())}


def run_process(instance: DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The pid the run last reported and when (Unix time), or None before it reported one."""
    records = instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ENGINE_EVENT, ascending=False, limit=50
    ).records
    for record in records:
        event = record.event_log_entry.dagster_event
        data = event.engine_event_data if event else None
        pid = data.metadata.get("pid") if data else None
        if pid is not None and str(pid.value).isdigit():
            return int(pid.value), record.event_log_entry.timestamp
    return None


def _creator(record: RunRecord) -> tuple[int, float] | None:
    """The process that created a run to execute it itself (PID_TAG), and when."""
    pid = record.dagster_run.tags.get(PID_TAG, "")
    return (int(pid), record.create_timestamp.timestamp()) if pid.isdigit() else None


def reap_dead_runs(instance: DagsterInstance, pools: Iterable[str] = ()) -> list[DeadRun]:
    """Fail every in-flight run whose process is gone, and every NOT_STARTED one whose creator
    (PID_TAG) is gone, and free its pool slots; free the slots that finished runs still hold in
    `pools`, and hand a free slot to a step Dagster forgot. Safe to call from several processes at
    once."""
    if not isinstance(instance.run_launcher, DefaultRunLauncher):
        return []
    dead: list[DeadRun] = []
    for record in instance.get_run_records(filters=RunsFilter(statuses=REAPABLE)):
        run = record.dagster_run
        found = run_process(instance, run.run_id) or _creator(record)
        if found is None or processes.alive(*found):
            continue
        current = instance.get_run_by_id(run.run_id)
        if current is None or current.status not in REAPABLE:
            continue  # another process reaped it, or it ended after all
        instance.report_run_failed(
            current, message=f"Cortex: the run's process (pid {found[0]}) is gone; marked failed"
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        dead.append(DeadRun(run.run_id, run.job_name, found[0]))
    for pool in pools:
        freed = False
        for run_id in instance.event_log_storage.get_concurrency_info(pool).active_run_ids:
            holder = instance.get_run_by_id(run_id)
            if holder is None or holder.is_finished:
                instance.event_log_storage.free_concurrency_slots_for_run(run_id)  # hands it on
                freed = True
        if not freed:
            wake_forgotten_steps(instance, [pool])
    return dead


def wake_forgotten_steps(instance: DagsterInstance, pools: Iterable[str]) -> list[str]:
    """Hand a free slot to the first step queued for it, in each of `pools` where steps wait while
    a slot is free and assigned to none of them: the slot was freed between a step's look at the
    pool and its joining the queue, and Dagster hands a slot on only as it is freed. Returns those
    pools. A slot handed on twice is harmless: a step claims the slot itself, so the second waits."""
    storage = instance.event_log_storage
    woken = []
    for pool in pools:
        info = storage.get_concurrency_info(pool)
        assigned = sum(1 for step in info.pending_steps if step.assigned_timestamp is not None)
        waiting = len(info.pending_steps) - assigned
        if waiting and info.slot_count > assigned:
            storage.assign_pending_steps([pool])
            woken.append(pool)
    return woken


def wake_forgotten_steps_when_free(instance: DagsterInstance, pools: Iterable[str]) -> None:
    """wake_forgotten_steps for callers that look again soon (a sensor's next tick, the waker's next
    turn): a busy index database is left for then, not raised."""
    with suppress(SQLAlchemyError, sqlite3.Error):
        wake_forgotten_steps(instance, pools)


@contextmanager
def forgotten_steps_woken(
    instance: DagsterInstance, pools: Iterable[str], every_s: float = 1.0
) -> Iterator[None]:
    """While the block runs (a job this process executes), wake forgotten steps every `every_s`:
    nothing else does for a `cortex run` waiting on another's slot when no `cortex dev` runs."""
    pools, stop = list(pools), threading.Event()

    def keep_waking() -> None:
        while not stop.wait(every_s):
            wake_forgotten_steps_when_free(instance, pools)

    thread = threading.Thread(target=keep_waking, name="cortex-pool-waker", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def live_holders(instance: DagsterInstance, pools: Iterable[str]) -> list[str]:
    """Runs that hold a slot in any of `pools` right now (after dead ones are reaped)."""
    reap_dead_runs(instance, pools)
    return sorted(
        {
            run_id
            for pool in pools
            for run_id in instance.event_log_storage.get_concurrency_info(pool).active_run_ids
        }
    )


def wait_for_pools(
    instance: DagsterInstance, pools: Iterable[str], on_wait: Callable[[list[str]], None]
) -> None:
    """Block until no live run holds a slot in `pools`, reaping dead holders as they die.

    Dagster's own wait for a pool slot defers SIGINT and SIGTERM until the step starts; this
    wait runs before the run, so Ctrl-C and SIGTERM stop it at once."""
    pools = list(pools)
    told: list[str] = []
    while holders := live_holders(instance, pools):
        if holders != told:
            on_wait(holders)
            told = holders
        time.sleep(POLL_S)
