"""Sensors: how outside events (inbox files) become Dagster runs."""

from cortex_pipelines.sensors.inbox import inbox_sensor

__all__ = ["inbox_sensor"]
