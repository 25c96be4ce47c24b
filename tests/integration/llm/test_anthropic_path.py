"""The anthropic provider end to end: the real SDK against a local Messages API server."""

from __future__ import annotations

from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.llm import make_client
from cortex_pipelines.storage import bus, outbox, usage
from tests.support.inbox import drop, msg
from tests.support.messages_server import error, text, tool_use


def _anthropic(settings, server, **extra):
    options = {
        "llm_provider": "anthropic",
        "base_url": server.url,
        "api_key": "test-key",
        "model": "claude-test",
        "llm_retries": 2,
        **extra,
    }
    return load_settings(settings.home, **options)


def test_one_tool_round_through_the_sdk(settings, db, messages_server):
    s = _anthropic(settings, messages_server)
    drop(s, "telegram", "a.json", msg("telegram", "I prefer aisle seats.", "1"))
    drop(s, "webchat", "b.json", msg("webchat", "Which seat do I like?", "2"))
    ingest_inbox(s, db)
    messages_server.script(
        text("Noted."),
        tool_use("memory_query", {"query": "seat preference"}),
        text("You prefer aisle seats (you said so on telegram)."),
    )
    report = Brain(db, s, make_client(s)).drain()
    assert report.completed == 2 and report.llm_calls == 3

    first, ask, answer = messages_server.requests
    assert first["model"] == "claude-test" and "You are Cortex" in first["system"]
    assert {t["name"] for t in ask["tools"]} >= {"memory_query", "fetch_chat_history", "sessions_spawn"}
    tool_result = answer["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and "aisle seats" in tool_result["content"]
    assert answer["messages"][-2]["content"][-1]["name"] == "memory_query"
    assert db.run(outbox.waiting)[-1]["text"] == "You prefer aisle seats (you said so on telegram)."

    totals = db.run(usage.totals)
    assert totals["calls"] == 3 and totals["input_tokens"] > 0 and totals["output_tokens"] > 0
    models = db.query("SELECT DISTINCT provider, model, purpose FROM llm_usage")
    assert models == [("anthropic", "claude-test", "reply")]


def test_rate_limit_is_retried_by_the_sdk(settings, db, messages_server):
    s = _anthropic(settings, messages_server)
    drop(s, "webchat", "a.json", msg("webchat", "hello", "1"))
    ingest_inbox(s, db)
    messages_server.script(error(429, headers={"retry-after": "0"}), text("hi!"))
    report = Brain(db, s, make_client(s)).drain()
    assert report.completed == 1 and len(messages_server.requests) == 2


def test_persistent_server_errors_fail_the_message_visibly(settings, db, messages_server):
    s = _anthropic(settings, messages_server, llm_retries=0, max_attempts=1)
    drop(s, "webchat", "a.json", msg("webchat", "hello", "1"))
    ingest_inbox(s, db)
    messages_server.script(error(500))
    report = Brain(db, s, make_client(s)).drain()
    assert report.failed == 1
    assert db.run(bus.counts)["failed"] == 1
    assert "HTTP 500" in db.query("SELECT error FROM bus")[0][0]
    assert db.query("SELECT ok FROM llm_usage") == [(False,)]
