"""Extraction when enough new turns arrive (seed 001), between the 6-hourly schedule ticks."""

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from cortex_pipelines.jobs import memory_job
from cortex_pipelines.memory.pipeline import EXTRACTION_CURSOR
from cortex_pipelines.resources import CortexResource
from cortex_pipelines.storage import cursors


@sensor(
    job=memory_job,
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description="Requests fact extraction once extraction_every_turns new user turns are waiting.",
)
def memory_sensor(context: SensorEvaluationContext, cortex: CortexResource):
    waiting, newest = cortex.database().run(cursors.user_turns_after, EXTRACTION_CURSOR)
    needed = cortex.settings().extraction_every_turns
    if waiting < needed:
        return SkipReason(f"{waiting} new user turn(s); extracting at {needed}")
    return RunRequest(run_key=f"facts-after-{newest}")
