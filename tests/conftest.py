"""Shared fixtures: a fresh CORTEX_HOME per test, with the offline provider and no API key."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

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


@pytest.fixture
def settings(tmp_path) -> Settings:
    s = load_settings(tmp_path / "home")
    init_home(s)
    return s


@pytest.fixture
def db(settings) -> Database:
    return Database(settings.paths.db)


def drop(settings: Settings, channel: str, name: str, *messages: dict | str) -> Path:
    """Write a file into the inbox as a connector would (dicts become JSON, str is raw)."""
    folder = settings.paths.inbox / channel
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if len(messages) == 1 and isinstance(messages[0], str):
        path.write_text(messages[0])
    elif name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    else:
        path.write_text(json.dumps(messages[0]))
    return path


def msg(channel: str, text: str, ext: str, **extra) -> dict:
    return {"channel": channel, "text": text, "sender": "maya", "external_id": ext, **extra}
