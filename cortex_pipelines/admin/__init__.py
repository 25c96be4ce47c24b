"""The owner's admin surface: `cortex chat` and its view of the Dagster instance."""
