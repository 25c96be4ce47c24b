"""Retention: turn retention (seed 001's turn TTL, `CORTEX_TURN_TTL_DAYS`, off by default) erases
messages older than the TTL from every store, while what was learnt from them stays; run-history
retention (`CORTEX_RUN_HISTORY_DAYS`, 30 by default) deletes Dagster's finished runs older than that.
Sensors rather than jobs: erasure cleans Dagster's run storage too, so it runs when no run is in
flight, and a pruning job would itself add a run to the history it prunes."""

from datetime import timedelta

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from cortex_pipelines import clock
from cortex_pipelines.admin.erase import EraseError, expire
from cortex_pipelines.resources import SettingsResource
from cortex_pipelines.storage.run_history import RUNS_PER_CALL, prune_runs


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


@sensor(
    minimum_interval_seconds=3600,
    default_status=DefaultSensorStatus.RUNNING,
    description=(
        "Deletes finished Dagster runs older than CORTEX_RUN_HISTORY_DAYS (30), with their event and "
        "compute logs; keeps the newest run of each job and those holding an asset's latest."
    ),
)
def run_history_retention(context: SensorEvaluationContext, settings: SettingsResource):
    days = settings.get().run_history_days
    if not days:
        return SkipReason("run-history retention is off (CORTEX_RUN_HISTORY_DAYS is 0)")
    pruned = prune_runs(context.instance, clock.now() - timedelta(days=days), limit=RUNS_PER_CALL)
    stopped = f"; stopped: {pruned.stopped}" if pruned.stopped else ""
    if stopped:  # a busy database: the next tick goes on
        context.log.warning(f"run history: stopped after {pruned.deleted} run(s): {pruned.stopped}")
    if pruned.deleted:
        return SkipReason(pruned.describe(days) + stopped)
    kept = (
        f" ({pruned.kept} kept: the newest of their job or holding an asset's latest)" if pruned.kept else ""
    )
    return SkipReason(f"no finished run older than {days} days to delete{kept}{stopped}")
