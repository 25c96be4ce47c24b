"""What the brain publishes about the conversation: tracked threads and decisions."""
