"""How a sensor that put messages on the bus asks for a processing run: one at a time, keyed on
what is waiting, never while a live run in the brain lane is already draining (a dead one is
failed and its slot freed first, so one SIGKILL never stops the instance answering)."""

import json

from dagster import (
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
)

from cortex_pipelines.assets.brain import BRAIN_POOL
from cortex_pipelines.jobs import BRAIN_LANE
from cortex_pipelines.lanes import reap_dead_runs
from cortex_pipelines.storage import Database, bus

ACTIVE = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]


def request_processing(
    context: SensorEvaluationContext, db: Database, cursor: dict, events: list | None = None
) -> SensorResult:
    events = events or []
    due, key = bus.due_pending(db)
    if due == 0:
        return SensorResult(
            skip_reason=SkipReason("no messages waiting"), asset_events=events, cursor=json.dumps(cursor)
        )
    active = context.instance.get_runs(filters=RunsFilter(tags=BRAIN_LANE, statuses=ACTIVE), limit=1)
    if active:
        for dead in reap_dead_runs(context.instance, [BRAIN_POOL]):
            context.log.warning(dead.describe())
        active = context.instance.get_runs(filters=RunsFilter(tags=BRAIN_LANE, statuses=ACTIVE), limit=1)
    if active:
        return SensorResult(
            skip_reason=SkipReason(f"{due} waiting; run {active[0].run_id[:8]} is draining the bus"),
            asset_events=events,
            cursor=json.dumps(cursor),
        )
    cursor["last_run_key"] = key
    return SensorResult(
        run_requests=[RunRequest(run_key=key, tags=BRAIN_LANE)],
        asset_events=events,
        cursor=json.dumps(cursor),
    )
