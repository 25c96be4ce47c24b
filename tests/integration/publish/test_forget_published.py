"""Forget reaches the published files: a forgotten fact's messages, and the decisions, threads and
hot-snapshot lines drawn from them, leave out/ as soon as `cortex forget` returns and at every later
run; `cortex unforget` brings them back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cortex

VESPA = "Let's talk about the garage project. We decided to sell the old Vespa."
HELIOS = "Let's talk about the Helios redesign."
SEATS = "I prefer window seats on long flights."


def _out(home: Path) -> dict[str, str]:
    """Every file other agents read in out/, by name."""
    return {path.name: path.read_text(encoding="utf-8") for path in sorted((home / "out").glob("*.md"))}


def _fact_id(home: Path, query: str, said: str) -> int:
    found = json.loads(cortex("recall", query, "-k", "5", "--json", home=home).stdout)
    return next(h["fact_id"] for h in found if said in h["text"] and h.get("fact_id"))


@pytest.mark.slow
def test_a_forgotten_decision_leaves_every_published_file_and_unforget_brings_it_back(tmp_path):
    """QA s9: the decision, its thread and its timeline line stayed in narrative.md and three times
    in BOOTSTRAP.md after a forget, while the bulletin was clean. Now none of out/ quotes it, at
    once and after a later run; what other messages said stays; unforget restores the narrative
    as it was. The conversation is compacted at once, so hot-snapshot.md (and BOOTSTRAP.md's copy
    of it, for an hour) quotes the message too: it kept quoting it after the forget."""
    home = tmp_path / "home"
    cortex("init", home=home)
    for text in (VESPA, HELIOS, SEATS):
        cortex("send", "webchat", text, "--sender", "maya", home=home)
    cortex("run", home=home, env={"CORTEX_COMPACTION_IDLE_MINUTES": "0"})
    before = _out(home)
    assert before["narrative.md"].count("Vespa") == 2  # the decision and the timeline
    assert "### 🟡 garage project" in before["BOOTSTRAP.md"]
    assert f"] user: {VESPA} (msg 1)" in before["hot-snapshot.md"]
    assert "## Hot snapshot" in before["BOOTSTRAP.md"]
    snapshot_time = (home / "out" / "hot-snapshot.md").stat().st_mtime_ns
    fact_id = _fact_id(home, "Vespa", "Vespa")

    cortex("forget", str(fact_id), home=home)
    at_once = _out(home)
    # Its time stays: BOOTSTRAP.md embeds a snapshot for an hour after it, not after the forget.
    assert (home / "out" / "hot-snapshot.md").stat().st_mtime_ns == snapshot_time
    assert not [name for name, text in at_once.items() if "Vespa" in text or "garage" in text], at_once
    assert "- none" in at_once["narrative.md"].split("## Decisions")[1]
    assert SEATS in at_once["narrative.md"] and "Helios redesign" in at_once["BOOTSTRAP.md"]
    assert f"] user: {SEATS}" in at_once["hot-snapshot.md"]

    cortex("--now", "+2h", "run", home=home)
    later = _out(home)
    assert not [name for name, text in later.items() if "Vespa" in text or "garage" in text], later
    assert SEATS in later["narrative.md"]

    cortex("unforget", str(fact_id), home=home)
    back = _out(home)
    assert back["narrative.md"] == before["narrative.md"]
    assert back["hot-snapshot.md"] == before["hot-snapshot.md"]
    assert "### 🟡 garage project" in back["BOOTSTRAP.md"]
    recent = back["BOOTSTRAP.md"].split("## Recent decisions")[1]
    assert "We decided to sell the old Vespa. (msg 1)" in recent
