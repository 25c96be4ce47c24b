"""Jobs and schedules. The jobs that answer messages carry the brain lane's tags themselves, so a
run executed in process (`cortex run`) is in the lane too (see lanes.py). Memory schedules follow
the seeds' cadence."""

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    OpExecutionContext,
    ScheduleDefinition,
    define_asset_job,
    in_process_executor,
    job,
    op,
)

from cortex_pipelines.lanes import BRAIN_RUN_TAGS
from cortex_pipelines.memory.pipeline import rebuild
from cortex_pipelines.resources import CortexResource


def _job(name: str, selection: AssetSelection, description: str, tags: dict | None = None):
    return define_asset_job(
        name,
        selection=selection,
        tags=tags or {},
        executor_def=in_process_executor,
        description=description,
    )


process_messages = _job(
    "process_messages",
    AssetSelection.assets("session_messages"),
    "Answer every pending message, strictly in bus order.",
    BRAIN_RUN_TAGS,
)
cortex_main = _job(
    "cortex_main",
    AssetSelection.all() - AssetSelection.assets("bus_messages"),
    "Process all pending messages, then materialize every memory asset.",
    BRAIN_RUN_TAGS,
)
memory_job = _job(
    "memory_job",
    AssetSelection.assets("episodic_memory", "extracted_facts"),
    "Index new session messages and extract facts from new user turns.",
)
compaction_job = _job(
    "compaction_job",
    AssetSelection.assets("channel_summaries"),
    "Summarize idle channels and demote them to the background.",
)
eviction_job = _job(
    "eviction_job", AssetSelection.assets("cold_memory"), "Move stale hot facts to cold storage."
)
harvest_job = _job(
    "harvest_job", AssetSelection.assets("harvested_ops"), "Turn results of delegated work into facts."
)
maintenance_job = _job(
    "maintenance_job",
    AssetSelection.assets("memory_maintenance"),
    "Decay, prune, merge and consolidate memory; optimize LanceDB.",
)
observations_job = _job(
    "observations_job",
    AssetSelection.assets("observations"),
    "Notice repeated behaviour over the last active week and remember it as observations.",
)

publish_job = _job(
    "publish_job",
    AssetSelection.assets("threads", "decisions", "narrative", "memory_bulletin", "boot_context"),
    "Refresh threads, decisions, narrative.md, memory_bulletin.md and BOOTSTRAP.md (files whose "
    "content is unchanged are not rewritten).",
)


@op(description="Drop the LanceDB tables and re-embed every message and fact from DuckDB.")
def rebuild_memory(context: OpExecutionContext, cortex: CortexResource) -> None:
    counts = rebuild(
        cortex.database(), cortex.vectors(), cortex.embedder(), cortex.settings(), log=context.log.info
    )
    context.log.info(f"rebuilt memory: {counts}")


@job(
    executor_def=in_process_executor,
    tags={"cortex/lane": "memory"},
    description="Re-embed and re-index everything (model change, damaged LanceDB folder).",
)
def rebuild_memory_job():
    rebuild_memory()


JOBS = [
    rebuild_memory_job,
    process_messages,
    cortex_main,
    memory_job,
    compaction_job,
    eviction_job,
    harvest_job,
    maintenance_job,
    observations_job,
    publish_job,
]


def _schedule(job, cron: str) -> ScheduleDefinition:
    return ScheduleDefinition(
        job=job, cron_schedule=cron, default_status=DefaultScheduleStatus.RUNNING, execution_timezone="UTC"
    )


SCHEDULES = [
    _schedule(memory_job, "0 */6 * * *"),  # fact extraction: every 6 h (seed 000)
    _schedule(compaction_job, "5 * * * *"),  # channel compaction: hourly
    _schedule(eviction_job, "15 3 * * 0"),  # vector eviction: weekly
    _schedule(harvest_job, "30 */6 * * *"),  # op harvesting: every 6 h
    _schedule(maintenance_job, "45 3 * * *"),  # decay / prune / merge: daily
    _schedule(observations_job, "20 4 * * *"),  # pattern observations: daily (seed 004)
    _schedule(publish_job, "50 * * * *"),  # bulletin refresh: every 60 min (seed 004)
]
