"""Turn retention (seed 001's turn TTL, `CORTEX_TURN_TTL_DAYS`, off by default): messages older than
the TTL are erased from every store, while what was learnt from them stays. A sensor rather than a
job: erasure cleans Dagster's run storage too, so it runs when no run is in flight."""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from cortex_pipelines.admin.erase import EraseError, expire
from cortex_pipelines.resources import SettingsResource


@sensor(
    minimum_interval_seconds=3600,
    default_status=DefaultSensorStatus.RUNNING,
    description="Erases messages older than CORTEX_TURN_TTL_DAYS (off by default); facts stay.",
)
def turn_retention(context: SensorEvaluationContext, settings: SettingsResource):
    config = settings.get()
    if not config.turn_ttl_days:
        return SkipReason("turn retention is off (CORTEX_TURN_TTL_DAYS is not set)")
    try:
        expired = expire(config)
    except EraseError as exc:  # a run in flight or the brain lease taken: the next tick tries again
        return SkipReason(f"not now: {exc}")
    for warning in expired.warnings:
        context.log.warning(warning)
    if not expired.messages:
        return SkipReason(f"nothing older than {config.turn_ttl_days} days")
    return SkipReason(f"expired {len(expired.messages)} message(s) older than {config.turn_ttl_days} days")
