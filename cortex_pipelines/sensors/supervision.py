"""The supervision sensor (seed 004): fails runs whose process died and frees their pool slots,
exports replies a killed run committed, requeues messages stuck in processing, fails delegated work
past its deadline (and has the owner told at once), and records brain-lane runs that outlive their
max runtime (run monitoring in the shipped dagster.yaml fails them)."""

from datetime import UTC, datetime

from dagster import DefaultSensorStatus, RunsFilter, SensorEvaluationContext, SkipReason, sensor

from cortex_pipelines.assets.brain import BRAIN_POOL
from cortex_pipelines.assets.memory import MEMORY_POOL
from cortex_pipelines.jobs import process_messages
from cortex_pipelines.lanes import BRAIN_LANE, MAX_RUNTIME_S, reap_dead_runs
from cortex_pipelines.proactive.supervision import supervise
from cortex_pipelines.resources import DatabaseResource, SettingsResource
from cortex_pipelines.sensors.processing import ACTIVE, request_processing
from cortex_pipelines.storage import outbox


@sensor(
    job=process_messages,
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description="Finds stuck messages, overdue delegated work and hung runs; fixes or records them.",
)
def supervision(context: SensorEvaluationContext, settings: SettingsResource, database: DatabaseResource):
    config, db = settings.get(), database.get()
    for dead in reap_dead_runs(context.instance, [BRAIN_POOL, MEMORY_POOL]):
        context.log.warning(dead.describe())
    try:
        db.run(outbox.export_files, config.paths)  # replies a killed run committed but never exported
    except OSError as exc:  # an unwritable outbox folder must not stop supervision
        context.log.warning(f"reply files not exported now: {exc}")
    runs = context.instance.get_runs(filters=RunsFilter(tags=BRAIN_LANE, statuses=ACTIVE), limit=10)
    now = datetime.now(UTC).timestamp()
    hung = [
        {
            "run_id": run.run_id,
            "job": run.job_name,
            "started": datetime.fromtimestamp(record.start_time, UTC),
        }
        for run in runs
        if (record := context.instance.get_run_record_by_id(run.run_id)) is not None
        and record.start_time is not None
        and now - record.start_time > MAX_RUNTIME_S
    ]
    findings = db.run(supervise, config, bool(runs), hung)
    for f in findings:
        context.log.warning(f"{f.kind} {f.subject}: {f.action} ({f.detail})")
    # Messages to answer now: requeued ones, and the notices telling the owner of overdue work.
    if any((f.kind, f.action) in (("stuck_message", "requeued"), ("overdue_op", "failed")) for f in findings):
        return request_processing(context, config, db, {})
    if not findings:
        return SkipReason("all clear")
    listed = "; ".join(f"{f.kind} {f.subject} {f.action}" for f in findings[:5])
    return SkipReason(f"{len(findings)} finding(s): {listed}" + ("; …" if len(findings) > 5 else ""))
