"""Cost in the open: `cortex status` shows the cached share and an estimated cost per day; every
LLM-backed asset shows its tokens and estimated cost, and keeps to its daily token budget."""

from __future__ import annotations

import json
import os
import re

from dagster import DagsterInstance, materialize

from cortex_pipelines.assets.brain import session_messages
from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.llm import make_client
from cortex_pipelines.resources import cortex_resources
from cortex_pipelines.storage import usage
from tests.support.cli import cortex
from tests.support.inbox import drop, msg
from tests.support.messages_server import text
from tests.support.published import CONVERSATION, ingest_recent_history, materialize_all

LLM_ASSETS = ("extracted_facts", "channel_summaries", "observations", "memory_bulletin")


def test_status_shows_the_cached_share_and_an_estimated_cost_per_day(settings, db, messages_server):
    s = load_settings(settings.home, llm_provider="anthropic", base_url=messages_server.url, api_key="k")
    (s.paths.workspace / "SOUL.md").write_text("Be brief and kind. " * 200)
    drop(s, "webchat", "a.json", msg("webchat", "hello there", "1"))
    drop(s, "webchat", "b.json", msg("webchat", "and hello again", "2"))
    ingest_inbox(s, db)
    messages_server.script(text("Hi."), text("Hi again."))
    Brain(db, s, make_client(s)).drain()
    totals = db.run(usage.totals)
    read, written = totals["cache_read_input_tokens"], totals["cache_creation_input_tokens"]
    share = read / (totals["input_tokens"] + read + written)
    assert read > 0

    line = next(x for x in cortex("status", home=s.home).stdout.splitlines() if x.startswith("llm cost"))
    assert f"{share:.0%} of input read from cache ({read} read, {written} written)" in line
    dollars = float(re.search(r"about \$([0-9.]+) a day", line).group(1))
    assert dollars > 0 and "(estimate from config prices)" in line
    as_json = json.loads(cortex("status", "--json", home=s.home).stdout)["llm"]
    assert as_json["cached_share"] == round(share, 4) and as_json["cost_per_day_usd"] > 0


def test_llm_assets_show_tokens_and_cost_and_keep_to_their_daily_budget(
    settings, db, tmp_path, messages_server
):
    env = {
        "CORTEX_LLM_PROVIDER": "anthropic",
        "CORTEX_BASE_URL": messages_server.url,
        "CORTEX_API_KEY": "test-key",
        "CORTEX_LLM_RETRIES": "0",
    }
    os.environ.update(env)
    try:
        ingest_recent_history(settings, db, tmp_path, CONVERSATION[:2])

        def responder(body):
            if "memory bulletin" in str(body["system"]).lower():
                return text("# Memory Bulletin\n\nMaya is a designer who likes window seats.")
            return text('[{"text": "Maya is a freelance product designer", "category": "identity"}]')

        messages_server.responder = responder
        with DagsterInstance.ephemeral() as instance:
            result = materialize_all(settings, instance)
            meta = {a: result.asset_materializations_for_node(a)[0].metadata for a in LLM_ASSETS}
            for name in LLM_ASSETS:
                assert meta[name]["llm_daily_token_budget"].value > 0
                assert "estimate from config prices" in meta[name]["llm_cost_basis"].value
            for name in LLM_ASSETS:  # a run that called the model shows what it cost
                called = meta[name]["llm_calls"].value > 0
                assert (meta[name]["llm_input_tokens"].value > 0) == called
                assert (meta[name]["llm_cost_usd_estimate"].value > 0) == called
                assert (
                    meta[name]["llm_cost_usd_estimate_today"].value
                    >= meta[name]["llm_cost_usd_estimate"].value
                )
            assert meta["extracted_facts"]["llm_calls"].value and meta["memory_bulletin"]["llm_calls"].value

            # The extraction budget is spent: the next run extracts with patterns, no LLM call.
            os.environ["CORTEX_EXTRACTION_DAILY_TOKEN_BUDGET"] = "1"
            calls = db.run(usage.totals)["calls"]
            drop(
                settings, "webchat", "later.json", msg("webchat", "I prefer aisle seats on trains.", "later")
            )
            ingest_inbox(settings, db)
            again = materialize_all(settings, instance)
        brain = again.asset_materializations_for_node("session_messages")[-1].metadata
        assert brain["completed"].value == 1 and brain["llm_cost_usd_estimate_today"].value > 0
        assert brain["llm_input_tokens_today"].value > 0 and brain["llm_daily_token_budget"].value > 0
        facts = again.asset_materializations_for_node("extracted_facts")[0].metadata
        assert facts["llm_calls"].value == 0 and facts["turns_read"].value == 1
        purposes = [r[0] for r in db.query("SELECT purpose FROM llm_usage WHERE id > ?", [calls])]
        assert "extraction" not in purposes
    finally:
        for key in [*env, "CORTEX_EXTRACTION_DAILY_TOKEN_BUDGET"]:
            os.environ.pop(key, None)


def test_a_spent_reply_budget_answers_with_the_offline_model(settings, db, messages_server, monkeypatch):
    for key, value in {
        "CORTEX_LLM_PROVIDER": "anthropic",
        "CORTEX_BASE_URL": messages_server.url,
        "CORTEX_API_KEY": "test-key",
        "CORTEX_REPLY_DAILY_TOKEN_BUDGET": "1",
        "CORTEX_BRAIN_LINGER_SECONDS": "0",  # answer what is queued and end
    }.items():
        monkeypatch.setenv(key, value)
    db.run(
        usage.record,
        provider="anthropic",
        model="claude-sonnet-4-6",
        purpose="reply",
        input_tokens=5,
        output_tokens=5,
        latency_ms=1.0,
        ok=True,
    )
    drop(settings, "webchat", "a.json", msg("webchat", "hello", "1"))
    ingest_inbox(settings, db)
    with DagsterInstance.ephemeral() as instance:
        result = materialize(
            [session_messages], instance=instance, resources=cortex_resources(str(settings.home))
        )
    assert result.success and not messages_server.requests  # the API was not called
    assert db.query("SELECT provider FROM llm_usage ORDER BY id") == [("anthropic",), ("offline",)]
    meta = result.asset_materializations_for_node("session_messages")[-1].metadata
    assert meta["completed"].value == 1 and meta["llm_daily_token_budget"].value == 1


def test_extraction_stops_calling_the_model_when_the_days_budget_is_spent_mid_run(
    settings, db, tmp_path, messages_server, monkeypatch
):
    """The budget was checked once, when a run began: the first extraction after importing years of
    history would call the model for every 40 turns (1,400 calls for 56,000 turns) on a
    200,000-token day. Now the calls stop once it is spent, and patterns extract the rest."""
    for key, value in {
        "CORTEX_LLM_PROVIDER": "anthropic",
        "CORTEX_BASE_URL": messages_server.url,
        "CORTEX_API_KEY": "test-key",
        "CORTEX_LLM_RETRIES": "0",
        "CORTEX_EXTRACTION_DAILY_TOKEN_BUDGET": "500",  # less than one call of 40 turns takes
    }.items():
        monkeypatch.setenv(key, value)
    said = [("webchat", f"I prefer aisle seats on train number {n}.") for n in range(100)]
    ingest_recent_history(settings, db, tmp_path, said)
    messages_server.responder = lambda body: text('[{"text": "Maya likes trains", "category": "preference"}]')

    with DagsterInstance.ephemeral() as instance:
        result = materialize_all(settings, instance)
    facts = result.asset_materializations_for_node("extracted_facts")[0].metadata
    assert facts["turns_read"].value == 100 and facts["llm_calls"].value == 1
    calls = db.query("SELECT count(*) FROM llm_usage WHERE purpose = 'extraction'")
    assert calls == [(1,)]
    assert facts["llm_input_tokens_today"].value > 500  # the one call spent it
