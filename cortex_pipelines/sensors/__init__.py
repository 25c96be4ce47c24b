"""Sensors: how outside events (inbox files, new turns) become Dagster runs."""

from cortex_pipelines.sensors.inbox import inbox_sensor
from cortex_pipelines.sensors.memory import memory_sensor

SENSORS = [inbox_sensor, memory_sensor]

__all__ = ["SENSORS", "inbox_sensor", "memory_sensor"]
