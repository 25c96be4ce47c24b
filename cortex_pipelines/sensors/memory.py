"""Extraction when enough new turns arrive (seed 001), between the 6-hourly schedule ticks."""

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from cortex_pipelines.jobs import memory_job
from cortex_pipelines.memory import store
from cortex_pipelines.memory.pipeline import EXTRACTION_CURSOR
from cortex_pipelines.resources import CortexResource


@sensor(
    job=memory_job,
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description="Requests fact extraction once extraction_every_turns new user turns are waiting.",
)
def memory_sensor(context: SensorEvaluationContext, cortex: CortexResource):
    db = cortex.database()
    cursor = db.run(store.get_cursor, EXTRACTION_CURSOR)
    waiting, newest = db.query(
        "SELECT count(*), coalesce(max(id), 0) FROM session WHERE role = 'user' AND id > ?", [cursor]
    )[0]
    needed = cortex.settings().extraction_every_turns
    if waiting < needed:
        return SkipReason(f"{waiting} new user turn(s); extracting at {needed}")
    return RunRequest(run_key=f"facts-after-{newest}")
