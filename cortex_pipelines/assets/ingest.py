"""The bus is filled by the inbox sensor, not computed: an external asset the sensor reports."""

from dagster import AssetSpec

bus_messages = AssetSpec(
    "bus_messages",
    group_name="ingest",
    description="Inbound messages queued in DuckDB by the inbox sensor (idempotent per channel id).",
    kinds={"duckdb"},
)
