"""Software-defined assets, grouped as the architecture is: ingest → brain → memory → publish.

Every asset gets the same owner and a code version; bump CODE_VERSIONS[name] when an asset's
logic changes, so the UI marks exactly those assets as changed.
"""

from dagster import map_asset_specs

from cortex_pipelines.assets.brain import BRAIN_CHECKS, session_messages
from cortex_pipelines.assets.ingest import bus_messages
from cortex_pipelines.assets.memory import MEMORY_ASSETS, MEMORY_CHECKS
from cortex_pipelines.assets.publish import PUBLISH_ASSETS, PUBLISH_CHECKS

OWNERS = ["team:cortex"]
CODE_VERSIONS = {
    "session_messages": "3",
    "episodic_memory": "2",
    "extracted_facts": "2",
    "channel_summaries": "1",
    "cold_memory": "1",
    "harvested_ops": "1",
    "memory_maintenance": "1",
    "observations": "1",
    "threads": "1",
    "decisions": "1",
    "narrative": "1",
    "memory_bulletin": "1",
    "boot_context": "1",
}

ALL_ASSETS = map_asset_specs(
    lambda spec: spec.replace_attributes(
        owners=OWNERS, code_version=CODE_VERSIONS.get(spec.key.to_user_string(), spec.code_version)
    ),
    [bus_messages, session_messages, *MEMORY_ASSETS, *PUBLISH_ASSETS],
)
ALL_CHECKS = [*BRAIN_CHECKS, *MEMORY_CHECKS, *PUBLISH_CHECKS]

__all__ = ["ALL_ASSETS", "ALL_CHECKS"]
