"""The scheduler sensor: every due firing of a user's schedule becomes a `cron` message on the bus,
then a processing run is requested like for any inbox message."""

import json

from dagster import AssetMaterialization, DefaultSensorStatus, SensorEvaluationContext, sensor

from cortex_pipelines import clock
from cortex_pipelines.jobs import process_messages
from cortex_pipelines.proactive import schedules
from cortex_pipelines.resources import DatabaseResource, SettingsResource
from cortex_pipelines.sensors.processing import request_processing


@sensor(
    job=process_messages,
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.RUNNING,
    description="Fires due schedules and reminders as messages on the cron channel, and requests a "
    "processing run when any messages wait, as a backstop to the inbox sensor.",
)
def scheduler(context: SensorEvaluationContext, settings: SettingsResource, database: DatabaseResource):
    config, db = settings.get(), database.get()
    fired = db.run(lambda con: schedules.fire_due(con, config, clock.now()))
    cursor = json.loads(context.cursor) if context.cursor else {"fired": 0, "late": 0}
    cursor["fired"] += len(fired)
    cursor["late"] += sum(f.late for f in fired)
    events = []
    for firing in fired:
        line = f"fired {firing.job_id} due {firing.due_at:%Y-%m-%d %H:%M} UTC" + (
            f" late ({firing.missed} earlier firing(s) folded in)" if firing.late else ""
        )
        if firing.rerouted:  # the job's channel was removed or turned off since it was made
            context.log.warning(f"{line}; {firing.rerouted}")
        else:
            context.log.info(line)
    if fired:
        events.append(
            AssetMaterialization(
                "bus_messages", metadata={"scheduled_firings": len(fired), "late": sum(f.late for f in fired)}
            )
        )
    return request_processing(context, config, db, cursor, events)
