"""The processing brain: one message at a time, layered context, tools, routed output."""
