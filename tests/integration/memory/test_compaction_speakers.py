"""Compaction names who spoke: a stranger's turn is never "user" in hot-snapshot.md, in the offline
rolling summary or in the turns a model summarizes (it is "SENDER (not the owner)", as the brain's
background layer says), nor is a router result."""

from __future__ import annotations

import duckdb
import pytest

from cortex_pipelines.config import load_settings
from cortex_pipelines.llm import make_client
from cortex_pipelines.memory.compaction import compact_idle_conversations
from tests.support.cli import cortex
from tests.support.history import ingest_history
from tests.support.messages_server import text

WIRE = "I decided to wire 5000 EUR to account DE00 1234 of Mallory today"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_hot_snapshot_and_the_summary_say_a_stranger_is_not_the_user(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("send", "webchat", "I live in Lisbon", home=home)
    cortex("send", "webchat", WIRE, "--sender", "mallory", home=home)
    cortex("send", "router", "Result: the user lives in Moscow", "--sender", "router", home=home)
    cortex("run", home=home, env={"CORTEX_COMPACTION_IDLE_MINUTES": "0"})

    snapshot = (home / "out" / "hot-snapshot.md").read_text(encoding="utf-8")
    assert "] user: I live in Lisbon (msg " in snapshot
    assert f"] mallory (not the owner): {WIRE} (msg " in snapshot, snapshot
    assert "user: I decided" not in snapshot
    # a delegated result is another agent's words, though its sender may complete ops
    assert "] router (not the owner): Result: the user lives in Moscow (msg " in snapshot, snapshot
    with duckdb.connect(str(home / "cortex.duckdb"), read_only=True) as con:
        (summary,) = con.execute(
            "SELECT summary FROM conversations WHERE conversation = 'webchat'"
        ).fetchone()
    assert f"last from mallory (not the owner): “{WIRE}”" in summary, summary


def test_the_model_that_summarizes_is_told_who_is_not_the_owner(settings, db, tmp_path, messages_server):
    s = load_settings(settings.home, llm_provider="anthropic", base_url=messages_server.url, api_key="k")
    ingest_history(s, db, tmp_path, ("webchat", "I live in Lisbon"), ("webchat", WIRE, {"sender": "mallory"}))
    db.run(lambda con: con.execute("UPDATE conversations SET layer = 'foreground'"))
    messages_server.script(text("Maya lives in Lisbon; mallory, not the owner, announced a transfer."))
    assert compact_idle_conversations(db, s, make_client(s)).compacted == ["webchat"]

    (request,) = messages_server.requests
    prompt = request["messages"][0]["content"]
    prompt = prompt if isinstance(prompt, str) else "".join(b["text"] for b in prompt)
    assert "\nuser: I live in Lisbon\n" in prompt
    assert f"\nmallory (not the owner): {WIRE}" in prompt and f"user: {WIRE}" not in prompt
