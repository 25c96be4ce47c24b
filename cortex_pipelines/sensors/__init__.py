"""Sensors: how outside events (inbox files, due schedules, new turns, stuck work) become runs, and
the upkeep that must happen outside any run (turn and run-history retention)."""

from cortex_pipelines.sensors.inbox import inbox_sensor
from cortex_pipelines.sensors.memory import memory_sensor
from cortex_pipelines.sensors.retention import run_history_retention, turn_retention
from cortex_pipelines.sensors.scheduler import scheduler
from cortex_pipelines.sensors.supervision import supervision

SENSORS = [inbox_sensor, scheduler, supervision, memory_sensor, turn_retention, run_history_retention]

__all__ = [
    "SENSORS",
    "inbox_sensor",
    "memory_sensor",
    "run_history_retention",
    "scheduler",
    "supervision",
    "turn_retention",
]
