"""Cortex: the memory brain of a personal AI agent, as a Dagster project."""
