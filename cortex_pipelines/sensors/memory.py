"""Extraction when enough new turns arrive (seed 001), between the 6-hourly automation ticks."""

from dagster import (
    AssetSelection,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from cortex_pipelines.memory.pipeline import EXTRACTION_CURSOR
from cortex_pipelines.resources import DatabaseResource, SettingsResource
from cortex_pipelines.storage import cursors


@sensor(
    target=AssetSelection.assets("episodic_memory", "extracted_facts"),
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description="Requests fact extraction once extraction_every_turns new user turns are waiting.",
)
def memory_sensor(context: SensorEvaluationContext, settings: SettingsResource, database: DatabaseResource):
    waiting, newest = database.get().run(cursors.user_turns_after, EXTRACTION_CURSOR)
    needed = settings.get().extraction_every_turns
    if waiting < needed:
        return SkipReason(f"{waiting} new user turn(s); extracting at {needed}")
    return RunRequest(run_key=f"facts-after-{newest}")
