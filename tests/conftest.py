"""Shared fixtures: a fresh CORTEX_HOME per test, with the offline provider and no API key."""

from __future__ import annotations

import os
import random

import pytest

from cortex_pipelines.config import Settings, load_settings
from cortex_pipelines.instance import init_home
from cortex_pipelines.storage import Database

pytest_plugins = ["tests.support.fixtures"]


def pytest_configure(config):
    """One random crash seed per test run (the crash tests put it in their ids), drawn before xdist
    starts its workers so that they all collect the same tests; CRASH_SEED=<seed> replays a run."""
    os.environ.setdefault("CRASH_SEED", str(random.SystemRandom().randrange(2**32)))


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("CORTEX_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CORTEX_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster_home"))
    # A processing run answers what is queued and ends, as before lingering existed; the tests of
    # lingering (and of runs beside a lingering one) set their own window.
    monkeypatch.setenv("CORTEX_BRAIN_LINGER_SECONDS", "0")


@pytest.fixture
def settings(tmp_path) -> Settings:
    s = load_settings(tmp_path / "home")
    init_home(s)
    return s


@pytest.fixture
def db(settings) -> Database:
    return Database(settings.paths.db)
