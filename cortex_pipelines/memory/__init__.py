"""Long-term memory: what the agent recalls, and how it is kept."""
