"""The inbox sensor: ingest new files into the bus, then ask for a processing run if needed."""

import json

from dagster import (
    AssetMaterialization,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.jobs import BRAIN_LANE, process_messages
from cortex_pipelines.resources import CortexResource
from cortex_pipelines.storage import bus

_ACTIVE = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]


@sensor(
    job=process_messages,
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Moves inbox files into the DuckDB bus and requests a processing run when messages wait.",
)
def inbox_sensor(context: SensorEvaluationContext, cortex: CortexResource):
    settings = cortex.settings()
    db = cortex.database()
    report = ingest_inbox(settings, db)
    for outcome in report.rejected:
        context.log.warning(f"rejected {outcome.path.name}: {outcome.error}")
    events = []
    if report.accepted or report.rejected:
        events.append(
            AssetMaterialization(
                "bus_messages",
                metadata={
                    "accepted": report.accepted,
                    "duplicates": report.duplicates,
                    "rejected_files": len(report.rejected),
                    **{f"bus_{k}": v for k, v in bus.counts(db).items()},
                },
            )
        )
    cursor = json.loads(context.cursor) if context.cursor else {"ingested": 0, "rejected": 0}
    cursor["ingested"] += report.accepted
    cursor["rejected"] += len(report.rejected)
    due, key = bus.due_pending(db)
    if due == 0:
        return SensorResult(
            skip_reason=SkipReason("no messages waiting"), asset_events=events, cursor=json.dumps(cursor)
        )
    active = context.instance.get_runs(filters=RunsFilter(tags=BRAIN_LANE, statuses=_ACTIVE), limit=1)
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
