"""The Dagster code location. Importing this must stay cheap: no models, no database opens."""

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    in_process_executor,
)

from cortex_pipelines.assets import ALL_ASSETS, ALL_CHECKS
from cortex_pipelines.files import private_umask
from cortex_pipelines.jobs import JOBS
from cortex_pipelines.processes import polars_keeping_sigint
from cortex_pipelines.resources import cortex_resources
from cortex_pipelines.sensors import SENSORS

private_umask()  # the code server and every run process load this module
polars_keeping_sigint()  # so a run stops when Dagster terminates it

# Runs the memory and publish assets when their automation conditions say so; without it running
# nothing but the sensors' own runs happens, so it ships running like they do.
automation_sensor = AutomationConditionSensorDefinition(
    "automation_sensor",
    target=AssetSelection.all(),
    default_status=DefaultSensorStatus.RUNNING,
    description="Materializes memory and publish assets at their ticks when their inputs changed.",
)

defs = Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    jobs=JOBS,
    sensors=[*SENSORS, automation_sensor],
    resources=cortex_resources(),
    executor=in_process_executor,
)
