"""Software-defined assets, grouped as the architecture is: ingest → brain → memory → publish."""

from cortex_pipelines.assets.brain import session_messages
from cortex_pipelines.assets.ingest import bus_messages
from cortex_pipelines.assets.memory import MEMORY_ASSETS, MEMORY_CHECKS
from cortex_pipelines.assets.publish import PUBLISH_ASSETS, PUBLISH_CHECKS

ALL_ASSETS = [bus_messages, session_messages, *MEMORY_ASSETS, *PUBLISH_ASSETS]
ALL_CHECKS = [*MEMORY_CHECKS, *PUBLISH_CHECKS]

__all__ = ["ALL_ASSETS", "ALL_CHECKS"]
