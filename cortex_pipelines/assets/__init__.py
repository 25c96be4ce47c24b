"""Software-defined assets, grouped as the architecture is: ingest → brain → memory → publish.

Every asset gets the same owner; each sets its own code version and automation condition.
"""

from dagster import map_asset_specs

from cortex_pipelines.assets.brain import BRAIN_CHECKS, session_messages
from cortex_pipelines.assets.ingest import bus_messages
from cortex_pipelines.assets.memory import MEMORY_ASSETS, MEMORY_CHECKS
from cortex_pipelines.assets.publish import PUBLISH_ASSETS, PUBLISH_CHECKS

OWNERS = ["team:cortex"]

ALL_ASSETS = map_asset_specs(
    lambda spec: spec.replace_attributes(owners=OWNERS),
    [bus_messages, session_messages, *MEMORY_ASSETS, *PUBLISH_ASSETS],
)
ALL_CHECKS = [*BRAIN_CHECKS, *MEMORY_CHECKS, *PUBLISH_CHECKS]

__all__ = ["ALL_ASSETS", "ALL_CHECKS"]
