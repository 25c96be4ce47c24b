"""Benchmarks: numbers, never pass/fail tests."""
