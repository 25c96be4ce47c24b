"""The inbox sensor: ingest new files into the bus, then ask for a processing run if needed."""

import json

from dagster import (
    AssetMaterialization,
    DefaultSensorStatus,
    SensorEvaluationContext,
    sensor,
)

from cortex_pipelines.ingest.inbox import ingest_inbox, printable
from cortex_pipelines.jobs import process_messages
from cortex_pipelines.resources import DatabaseResource, SettingsResource
from cortex_pipelines.sensors.processing import request_processing
from cortex_pipelines.storage import bus


@sensor(
    job=process_messages,
    # The daemon evaluates sensors every 5 s at most; a shorter minimum makes every one of those
    # evaluations tick (with 5, one that comes a moment early is skipped, and the next is 10 s later).
    minimum_interval_seconds=1,
    default_status=DefaultSensorStatus.RUNNING,
    description="Moves inbox files into the DuckDB bus and requests a processing run when messages wait.",
)
def inbox_sensor(context: SensorEvaluationContext, settings: SettingsResource, database: DatabaseResource):
    db = database.get()
    report = ingest_inbox(settings.get(), db)
    for outcome in report.rejected:
        context.log.warning(f"rejected {printable(outcome.path.name)}: {outcome.error}")
    for outcome in report.deferred:  # looked at again next tick
        context.log.info(f"deferred {printable(outcome.path.name)}: {outcome.error}")
    events = []
    if report.accepted or report.rejected:
        events.append(
            AssetMaterialization(
                "bus_messages",
                metadata={
                    "accepted": report.accepted,
                    "duplicates": report.duplicates,
                    "rejected_files": len(report.rejected),
                    **{f"bus_{k}": v for k, v in db.run(bus.counts).items()},
                },
            )
        )
    cursor = json.loads(context.cursor) if context.cursor else {"ingested": 0, "rejected": 0}
    cursor["ingested"] += report.accepted
    cursor["rejected"] += len(report.rejected)
    return request_processing(context, db, cursor, events)
