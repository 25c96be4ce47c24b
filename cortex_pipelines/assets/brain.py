"""session_messages: the brain drains the bus and brings the session up to date."""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetMaterialization,
    DagsterExecutionInterruptedError,
    DagsterRunStatus,
    MaterializeResult,
    MetadataValue,
    asset,
)

from cortex_pipelines.assets.checks import Check, checks_in_one_step
from cortex_pipelines.assets.ingest import ingest_materialization
from cortex_pipelines.brain.linger import Linger
from cortex_pipelines.brain.loop import Brain, DrainReport
from cortex_pipelines.ingest.inbox import IngestReport, ingest_inbox
from cortex_pipelines.lanes import BRAIN_ASSET, LINGER_LIMIT_S, planned_assets
from cortex_pipelines.llm import cost
from cortex_pipelines.llm.offline import OfflineClient
from cortex_pipelines.publish.safe import one_line
from cortex_pipelines.resources import DatabaseResource, LLMResource, SettingsResource
from cortex_pipelines.storage import Database, bus, lease, outbox, usage
from cortex_pipelines.storage.session import count_turns

BRAIN_POOL = "cortex_brain"


@asset(
    deps=["bus_messages"],
    group_name="brain",
    pool=BRAIN_POOL,
    kinds={"duckdb", "anthropic"},
    description="The one session across channels: every due message answered, strictly one at a time.",
    # No automation condition: the inbox, scheduler and supervision sensors request these runs.
    # Bump code_version when answering changes.
    code_version="3",
)
def session_messages(
    context: AssetExecutionContext, settings: SettingsResource, database: DatabaseResource, llm: LLMResource
) -> MaterializeResult:
    db, config = database.get(), settings.get()
    client = cost.budgeted(db, config, "reply", llm.client(), context.log.warning) or OfflineClient()
    brain = Brain(db, config, client, log=context.log.info, run_id=context.run_id)
    linger = None
    # SIGINT or SIGTERM (`cortex dev` stopping) ends a run of this step alone with what it answered,
    # a success, unless the user terminated the run; in `cortex_main` it stops the run (`cortex run`
    # exits 130).
    alone = planned_assets(context.instance, context.run) == {BRAIN_ASSET}
    if config.brain_linger_seconds and alone:
        # Nothing in this run waits for this step: keep answering while the conversation goes on.
        linger = Linger(
            db,
            config,
            config.brain_linger_seconds,
            LINGER_LIMIT_S,
            on_batch=lambda batch: context.log_event(
                AssetMaterialization(context.asset_key, metadata=_batch_metadata(db, batch))
            ),
            on_ingest=lambda ingested: _report_ingest(context, db, ingested),
            stops=(DagsterExecutionInterruptedError, KeyboardInterrupt),
        )
    # A run started the moment a message arrived (run_starter.py) finds it still in the inbox.
    if (ingested := ingest_inbox(config, db)).accepted or ingested.rejected:
        _report_ingest(context, db, ingested)
    try:
        report = brain.drain(linger=linger, stop_on_interrupt=alone)
    except lease.BrainBusy as busy:
        context.log.warning(f"{busy}; that process answers the queue")
        return MaterializeResult(metadata={"skipped": MetadataValue.text(str(busy))})
    if _terminated_by_user(context):
        # Dagster marks the run canceled, not a success: the UI shows what the user asked for.
        raise DagsterExecutionInterruptedError(
            f"terminated: {report.processed} message(s) answered, the rest left in the queue"
        )
    spend = cost.run_metadata(db, config, "reply")  # today's replies: a run may linger over many batches
    return MaterializeResult(metadata={**_batch_metadata(db, report), **spend})


def _terminated_by_user(context: AssetExecutionContext) -> bool:
    """Whether this run was asked to stop by Terminate (the UI, the GraphQL API): Dagster marks it
    CANCELING before it sends SIGINT; `cortex dev` stopping sends SIGINT alone."""
    run = context.instance.get_run_by_id(context.run_id)
    return run is not None and run.status == DagsterRunStatus.CANCELING


def _batch_metadata(db: Database, report: DrainReport) -> dict:
    """One materialization per batch of answers: a run that lingers records each batch as soon as
    it is answered, and its end with what the bus holds then, so the counts of all materializations
    add up (the UI shows an answer's batch while the run waits for the next message)."""
    depth = db.run(bus.counts)
    return {
        "processed": report.processed,
        "completed": report.completed,
        "retried": report.retried,
        "failed": report.failed,
        "skipped": report.skipped,
        "recovered": report.recovered,
        "replies": len(report.replies),
        "llm_calls": report.llm_calls,
        "bus_pending": depth["pending"],
        "bus_failed": depth["failed"],
        "session_rows": db.run(count_turns),
        "llm_tokens_today": db.run(usage.tokens_today),
    }


def _report_ingest(context: AssetExecutionContext, db: Database, report: IngestReport) -> None:
    """What this run took from the inbox (as it starts or lingers), reported as the inbox sensor
    reports it."""
    if event := ingest_materialization(db, report, context.log):
        context.log_event(event)


def no_failed_messages(resources) -> AssetCheckResult:
    db = resources.database.get()
    failed = db.run(bus.latest_failures, 20)
    preview = "\n".join(f"- #{f['id']} {f['channel']}: {one_line(f['error'] or '', 300)}" for f in failed)
    return AssetCheckResult(
        passed=not failed,
        severity=AssetCheckSeverity.ERROR,
        metadata={"failed": db.run(bus.counts)["failed"], "latest": MetadataValue.md(preview or "none")},
    )


def no_dead_letters(resources) -> AssetCheckResult:
    db = resources.database.get()
    dead = db.run(outbox.dead_letters, 5)
    preview = "\n".join(
        f"- reply {d['id']} on {d['channel']}: {one_line(d['error'] or 'no reason given', 300)}" for d in dead
    )
    return AssetCheckResult(
        passed=not dead,
        severity=AssetCheckSeverity.ERROR,
        metadata={
            "dead_lettered": db.run(outbox.counts)["dead_lettered"],
            "latest": MetadataValue.md(preview or "none"),
        },
    )


BRAIN_CHECKS = [
    checks_in_one_step(
        "brain_checks",
        "The bus's failed messages and the outbox's dead letters.",
        [
            Check(
                "no_failed_messages",
                "session_messages",
                "Red while any message failed for good; `cortex retry` puts them back in the queue.",
                no_failed_messages,
            ),
            Check(
                "no_dead_letters",
                "session_messages",
                "Red while any reply is dead-lettered (undeliverable after CORTEX_OUTBOX_MAX_ATTEMPTS, "
                "or given up by its connector); `cortex outbox --dead` lists them, `--requeue-dead` "
                "retries them.",
                no_dead_letters,
            ),
        ],
    )
]
