"""Evaluating a sensor in a test as the daemon does: its resources built for one evaluation."""

from __future__ import annotations

from dagster import DagsterInstance, SensorDefinition, build_sensor_context

from cortex_pipelines.resources import cortex_resources


def evaluate(sensor: SensorDefinition, instance: DagsterInstance, home: str | None = None, **context):
    """One evaluation of `sensor` on the CORTEX_HOME `home` (None: the CORTEX_HOME variable).
    Resources that depend on others open and close with the context, hence the `with`."""
    with build_sensor_context(instance=instance, resources=cortex_resources(home), **context) as ctx:
        return sensor(ctx)
