"""Software-defined assets, grouped as the architecture is: ingest → brain → memory → publish."""

from cortex_pipelines.assets.brain import session_messages
from cortex_pipelines.assets.ingest import bus_messages

ALL_ASSETS = [bus_messages, session_messages]

__all__ = ["ALL_ASSETS", "bus_messages", "session_messages"]
