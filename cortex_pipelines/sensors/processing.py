"""How a sensor that put messages on the bus asks for a processing run: one at a time, keyed on
what is waiting, never while a live run in the brain lane is already draining (a dead one is
failed and its slot freed first, so one SIGKILL never stops the instance answering); that run is
told through the bus's doorbell instead, in case it is lingering for messages. Under `cortex dev`
the run starter (run_starter.py) usually started the run already; while it is starting one, the
sensor waits. Every tick that requests no run says why in the tick list."""

import json

from dagster import (
    DagsterRun,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
)
from dagster._check import CheckError
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG

from cortex_pipelines.assets.brain import BRAIN_POOL
from cortex_pipelines.config import Settings
from cortex_pipelines.lanes import ACTIVE, BRAIN_LANE, reap_dead_runs
from cortex_pipelines.run_starter import claim_run_request, starting_now
from cortex_pipelines.storage import Database, bus


def _sensor_name(context: SensorEvaluationContext) -> str | None:
    try:
        return context.sensor_name
    except CheckError:  # evaluated without a name (a test): Dagster skips no repeated key then
        return None


def _requested_before(context: SensorEvaluationContext, run_key: str) -> DagsterRun | None:
    """This sensor's earlier run for the same key: Dagster skips a request that repeats it, and
    would say so only in the daemon's log."""
    sensor = _sensor_name(context)
    if sensor is None:
        return None
    earlier = context.instance.get_runs(
        filters=RunsFilter(tags={RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: sensor}), limit=1
    )
    return earlier[0] if earlier else None


def request_processing(
    context: SensorEvaluationContext,
    settings: Settings,
    db: Database,
    cursor: dict,
    events: list | None = None,
) -> SensorResult:
    events = events or []

    def skip(reason: str) -> SensorResult:
        return SensorResult(skip_reason=SkipReason(reason), asset_events=events, cursor=json.dumps(cursor))

    due, waiting = db.run(bus.due_pending)
    key = f"{waiting}-model-{settings.model_access()}"
    if due == 0:
        return skip("no messages waiting")
    active = context.instance.get_runs(filters=RunsFilter(tags=BRAIN_LANE, statuses=ACTIVE), limit=1)
    if active:
        for dead in reap_dead_runs(context.instance, [BRAIN_POOL]):
            context.log.warning(dead.describe())
        active = context.instance.get_runs(filters=RunsFilter(tags=BRAIN_LANE, statuses=ACTIVE), limit=1)
    if active:
        bus.ring_doorbell(db.path)  # a run lingering for messages looks at the bus at once
        return skip(f"{due} waiting; run {active[0].run_id[:8]} is draining the bus")
    if starting_now(db.path):
        return skip(f"{due} waiting; `cortex dev` is starting a run for them")
    if earlier := _requested_before(context, key):
        return skip(
            f"{due} waiting; run {earlier.run_id[:8]} was already requested for the same messages "
            f"({earlier.status.value.lower()}); a new message, attempt or API key requests the next"
        )
    if (sensor := _sensor_name(context)) and (other := claim_run_request(db.path, key, sensor)):
        return skip(f"{due} waiting; {other} has just requested a run for the same messages")
    cursor["last_run_key"] = key
    return SensorResult(
        run_requests=[RunRequest(run_key=key, tags=BRAIN_LANE)],
        asset_events=events,
        cursor=json.dumps(cursor),
    )
