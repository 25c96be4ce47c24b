"""Sensors: how outside events (inbox files, due schedules, new turns, stuck work) become runs."""

from cortex_pipelines.sensors.inbox import inbox_sensor
from cortex_pipelines.sensors.memory import memory_sensor
from cortex_pipelines.sensors.scheduler import scheduler
from cortex_pipelines.sensors.supervision import supervision

SENSORS = [inbox_sensor, scheduler, supervision, memory_sensor]

__all__ = ["SENSORS", "inbox_sensor", "memory_sensor", "scheduler", "supervision"]
