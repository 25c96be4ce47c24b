"""Connectors: processes that carry messages between a chat service and the gateway."""
