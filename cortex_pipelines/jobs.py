"""Jobs. Every run that answers messages carries the brain lane tag, which the shipped
dagster.yaml limits to one run at a time."""

from dagster import AssetSelection, define_asset_job, in_process_executor

BRAIN_LANE = {"cortex/lane": "brain"}

process_messages = define_asset_job(
    "process_messages",
    selection=AssetSelection.assets("session_messages"),
    tags=BRAIN_LANE,
    executor_def=in_process_executor,
    description="Answer every pending message, strictly in bus order.",
)

cortex_main = define_asset_job(
    "cortex_main",
    selection=AssetSelection.all() - AssetSelection.assets("bus_messages"),
    tags=BRAIN_LANE,
    executor_def=in_process_executor,
    description="Process all pending messages, then materialize every memory asset.",
)
