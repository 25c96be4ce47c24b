"""The inbox sensor: ingest new files into the bus, then ask for a processing run if needed. It ticks
most often of all sensors, so it also hands on a pool slot Dagster forgot (see lanes.py's
wake_forgotten_steps): under `cortex dev` a step left so had waited for the supervision sensor, up to
60 s."""

import json

from dagster import DefaultSensorStatus, SensorEvaluationContext, sensor

from cortex_pipelines.assets.brain import BRAIN_POOL
from cortex_pipelines.assets.ingest import ingest_materialization
from cortex_pipelines.assets.memory import MEMORY_POOL
from cortex_pipelines.ingest.inbox import ingest_inbox, printable
from cortex_pipelines.jobs import process_messages
from cortex_pipelines.lanes import wake_forgotten_steps_when_free
from cortex_pipelines.resources import DatabaseResource, SettingsResource
from cortex_pipelines.sensors.processing import request_processing


@sensor(
    job=process_messages,
    # The daemon evaluates sensors every 5 s at most; a shorter minimum makes every one of those
    # evaluations tick (with 5, one that comes a moment early is skipped, and the next is 10 s later).
    minimum_interval_seconds=1,
    default_status=DefaultSensorStatus.RUNNING,
    description="Moves inbox files into the DuckDB bus and requests a processing run when messages wait; "
    "ticks with the daemon, about every 5 s (the 1 s minimum only keeps a tick from being skipped).",
)
def inbox_sensor(context: SensorEvaluationContext, settings: SettingsResource, database: DatabaseResource):
    wake_forgotten_steps_when_free(context.instance, [BRAIN_POOL, MEMORY_POOL])
    db = database.get()
    report = ingest_inbox(settings.get(), db)
    for outcome in report.deferred:  # looked at again next tick
        context.log.info(f"deferred {printable(outcome.path.name)}: {outcome.error}")
    event = ingest_materialization(db, report, context.log)
    events = [event] if event else []
    cursor = json.loads(context.cursor) if context.cursor else {"ingested": 0, "rejected": 0}
    cursor["ingested"] += report.accepted
    cursor["rejected"] += len(report.rejected)
    return request_processing(context, settings.get(), db, cursor, events)
