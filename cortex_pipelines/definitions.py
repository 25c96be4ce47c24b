"""The Dagster code location. Importing this must stay cheap: no models, no database opens."""

from dagster import Definitions, in_process_executor

from cortex_pipelines.assets import ALL_ASSETS, ALL_CHECKS
from cortex_pipelines.files import private_umask
from cortex_pipelines.jobs import JOBS, SCHEDULES
from cortex_pipelines.resources import CortexResource
from cortex_pipelines.sensors import SENSORS

private_umask()  # the code server and every run process load this module

defs = Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    jobs=JOBS,
    schedules=SCHEDULES,
    sensors=SENSORS,
    resources={"cortex": CortexResource()},
    executor=in_process_executor,
)
