"""Jobs. The jobs that answer messages carry the brain lane's tags themselves, so a run executed in
process (`cortex run`) is in the lane too (see lanes.py). The memory and publish assets have no
jobs or schedules: their automation conditions say when they run (automation.py)."""

from dagster import AssetSelection, OpExecutionContext, define_asset_job, in_process_executor, job, op

from cortex_pipelines.lanes import BRAIN_RUN_TAGS, PROCESSING_JOB
from cortex_pipelines.memory.pipeline import rebuild
from cortex_pipelines.resources import DatabaseResource, EmbedderResource, SettingsResource, VectorsResource


def _job(name: str, selection: AssetSelection, description: str):
    return define_asset_job(
        name,
        selection=selection,
        tags=BRAIN_RUN_TAGS,
        executor_def=in_process_executor,
        description=description,
    )


process_messages = _job(
    PROCESSING_JOB,
    AssetSelection.assets("session_messages"),
    "Answer every pending message, strictly in bus order, then the conversation's next ones as they "
    "arrive, until it has been quiet for CORTEX_BRAIN_LINGER_SECONDS.",
)
cortex_main = _job(
    "cortex_main",
    AssetSelection.all() - AssetSelection.assets("bus_messages"),
    "Process all pending messages, then materialize every memory asset.",
)


@op(description="Drop the LanceDB tables and re-embed every message and fact from DuckDB.")
def rebuild_memory(
    context: OpExecutionContext,
    settings: SettingsResource,
    database: DatabaseResource,
    vectors: VectorsResource,
    embedder: EmbedderResource,
) -> None:
    counts = rebuild(database.get(), vectors.get(), embedder.get(), settings.get(), log=context.log.info)
    context.log.info(f"rebuilt memory: {counts}")


@job(
    executor_def=in_process_executor,
    tags={"cortex/lane": "memory"},
    description="Re-embed and re-index everything (model change, damaged LanceDB folder).",
)
def rebuild_memory_job():
    rebuild_memory()


JOBS = [rebuild_memory_job, process_messages, cortex_main]
