"""Getting messages in: envelope validation and the inbox folder protocol."""
