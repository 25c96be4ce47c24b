"""Turn retention (issue 15, seed 001's turn TTL; off by default): with CORTEX_TURN_TTL_DAYS set,
messages older than that are erased from every store after each `cortex run` and by the hourly
`turn_retention` sensor, while the facts learnt from them stay, citing them by id."""

from __future__ import annotations

import json

import pytest
from dagster import DagsterInstance

from cortex_pipelines.sensors.retention import turn_retention
from tests.support.cli import cortex
from tests.support.sensors import evaluate
from tests.support.stores import files_holding, read_only

OLD = "Remember that my locker code is 4417."
TTL = {"CORTEX_TURN_TTL_DAYS": "30"}


@pytest.mark.slow
def test_a_message_older_than_the_ttl_leaves_every_store_and_its_fact_stays(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("--now", "-40d", "send", "webchat", OLD, home=home)
    cortex("--now", "-40d", "run", home=home)  # answered, and its fact extracted, 40 days ago
    assert files_holding(home, "Remember that my locker")

    cortex("send", "webchat", "I prefer window seats on long flights.", home=home)
    ran = cortex("run", home=home, env=TTL)
    assert "expired 1 message(s) older than 30 days" in ran.stdout, ran.stdout + ran.stderr

    assert files_holding(home, "Remember that my locker") == []  # the verbatim message, anywhere
    assert read_only(home, "SELECT count(*) FROM session WHERE content LIKE '%locker%'") == [(0,)]
    facts = read_only(home, "SELECT text, sources, status FROM facts WHERE text LIKE '%locker%'")
    [(text, sources, status)] = facts
    kept_turns = {r[0] for r in read_only(home, "SELECT id FROM session")}
    assert status == "active" and "4417" in text
    assert sources and not kept_turns.intersection(sources)  # provenance: erased-source ids
    hits = json.loads(cortex("recall", "locker code", "-k", "5", "--json", home=home).stdout)
    assert hits[0].get("fact_id") and "4417" in hits[0]["text"]
    assert not [h for h in hits if h["tier"] == "episodic" and "locker" in h["text"]]
    seats = json.loads(cortex("recall", "which seat do I like", "-k", "3", "--json", home=home).stdout)
    assert "window" in seats[0]["text"]  # a recent message is untouched


def test_expired_needs_the_ttl_and_takes_no_other_selector(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    off = cortex("erase", "--expired", home=home, check=False)
    assert off.returncode == 2 and "CORTEX_TURN_TTL_DAYS" in off.stderr and len(off.stderr.splitlines()) == 1
    mixed = cortex("erase", "--expired", "--matching", "x", home=home, check=False, env=TTL)
    assert mixed.returncode == 2 and "--expired takes no other selector" in mixed.stderr
    listed = cortex("erase", "--expired", home=home, env=TTL)
    assert "no message matches" in listed.stdout


def test_the_sensor_says_why_it_did_nothing(settings, monkeypatch):
    with DagsterInstance.ephemeral() as instance:
        skipped = evaluate(turn_retention, instance, str(settings.home))
        assert "turn retention is off" in skipped.skip_message
        monkeypatch.setenv("CORTEX_TURN_TTL_DAYS", "30")
        skipped = evaluate(turn_retention, instance, str(settings.home))
        assert "nothing older than 30 days" in skipped.skip_message
