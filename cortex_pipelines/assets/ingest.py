"""The bus is filled by the inbox sensor (and a lingering processing run), not computed: an
external asset they report."""

from dagster import AssetMaterialization, AssetSpec

from cortex_pipelines.ingest.inbox import IngestReport, printable
from cortex_pipelines.storage import Database, bus

bus_messages = AssetSpec(
    "bus_messages",
    group_name="ingest",
    description="Inbound messages queued in DuckDB by the inbox sensor (idempotent per channel id).",
    kinds={"duckdb"},
)


def ingest_materialization(db: Database, report: IngestReport, log) -> AssetMaterialization | None:
    """What one inbox pass put on the bus, as a bus_messages materialization (None when it took
    nothing); each rejected file is logged with its reason."""
    for outcome in report.rejected:
        log.warning(f"rejected {printable(outcome.path.name)}: {outcome.error}")
    if not (report.accepted or report.rejected):
        return None
    return AssetMaterialization(
        bus_messages.key,
        metadata={
            "accepted": report.accepted,
            "duplicates": report.duplicates,
            "rejected_files": len(report.rejected),
            **{f"bus_{k}": v for k, v in db.run(bus.counts).items()},
        },
    )
