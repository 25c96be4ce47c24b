"""The Dagster code location. Importing this must stay cheap: no models, no database opens."""

from dagster import Definitions, in_process_executor

from cortex_pipelines.assets import ALL_ASSETS
from cortex_pipelines.jobs import cortex_main, process_messages
from cortex_pipelines.resources import CortexResource
from cortex_pipelines.sensors import inbox_sensor

defs = Definitions(
    assets=ALL_ASSETS,
    jobs=[process_messages, cortex_main],
    sensors=[inbox_sensor],
    resources={"cortex": CortexResource()},
    executor=in_process_executor,
)
