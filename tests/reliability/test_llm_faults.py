"""LLM faults through the real SDK and a local Messages server: the loop retries with backoff,
then fails the message visibly (the user hears about it on the next turn) and goes on."""

from __future__ import annotations

import itertools

import pytest

from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.llm import make_client
from cortex_pipelines.storage import bus, outbox
from tests.support.inbox import drop, msg
from tests.support.messages_server import delay, error, message, raw, text, tool_use


def _settings(settings, server, **extra):
    options = {
        "llm_provider": "anthropic",
        "base_url": server.url,
        "api_key": "k",
        "llm_retries": 1,
        "llm_timeout_s": 1.0,
        "max_attempts": 2,
        "retry_backoff_s": 0,
        **extra,
    }
    return load_settings(settings.home, **options)


def _queue(s, db, *texts):
    for n, body in enumerate(texts):
        drop(s, "webchat", f"{n:03d}.json", msg("webchat", body, f"m{n}"))
    ingest_inbox(s, db)


@pytest.mark.parametrize(
    ("fault", "needle"),
    [
        (lambda: delay(3, then=text("too late")), "timed out"),
        (lambda: error(500), "HTTP 500"),
        (lambda: error(529), "HTTP 529"),
        (lambda: raw(200, b"{not json", "application/json"), "malformed"),
        (lambda: message([], stop_reason="end_turn"), "empty response"),
    ],
    ids=["timeout", "http-500", "overloaded", "malformed-body", "empty-response"],
)
def test_a_persistent_fault_fails_the_message_and_the_queue_goes_on(
    settings, db, messages_server, fault, needle
):
    s = _settings(settings, messages_server)
    _queue(s, db, "first message", "second message")
    # Every call for the first message fails (SDK retry included, both attempts); then all is well.
    calls = {"n": 0}

    def responder(body):
        calls["n"] += 1
        last = body["messages"][-1]["content"]
        return fault() if "first message" in str(last) and "second" not in str(last) else text("ok!")

    messages_server.responder = responder
    report = Brain(db, s, make_client(s)).drain()
    assert report.failed == 1 and report.completed == 1
    state, attempts, err = db.query("SELECT state, attempts, error FROM bus WHERE external_id = 'm0'")[0]
    assert (state, attempts) == ("failed", 2)
    assert needle.lower() in err.lower()
    assert [o["text"] for o in db.run(outbox.waiting)] == ["ok!"]
    # The user hears about it on the next turn, once.
    _queue(s, db, "third message")
    Brain(db, s, make_client(s)).drain()
    floor = "\n\n".join(block["text"] for block in messages_server.requests[-1]["system"])
    assert "[FAILED MESSAGE]" in floor and "first message" in floor


def test_rate_limit_with_retry_after_is_waited_out(settings, db, messages_server):
    s = _settings(settings, messages_server, llm_retries=2)
    _queue(s, db, "hello")
    messages_server.script(
        error(429, headers={"retry-after": "0"}), error(429, headers={"retry-after": "0"}), text("hi")
    )
    report = Brain(db, s, make_client(s)).drain()
    assert report.completed == 1 and db.run(bus.counts)["failed"] == 0 and len(messages_server.requests) == 3


def test_malformed_and_unknown_tool_calls_are_answered_with_errors(settings, db, messages_server):
    s = _settings(settings, messages_server)
    _queue(s, db, "look something up")
    messages_server.script(
        tool_use("memory_query", {"limit": "many"}),  # no query, wrong type
        tool_use("delete_everything", {}),
        text("I could not look that up."),
    )
    report = Brain(db, s, make_client(s)).drain()
    assert report.completed == 1
    bad, unknown = (r["messages"][-1]["content"][0] for r in messages_server.requests[1:3])
    assert bad["is_error"] and "invalid input for memory_query" in bad["content"]
    assert unknown["is_error"] and "unknown tool 'delete_everything'" in unknown["content"]


def test_more_than_five_tool_rounds_end_without_tools(settings, db, messages_server):
    s = _settings(settings, messages_server, max_attempts=1)
    _queue(s, db, "loop")
    asked = itertools.count()  # a new query each round: a repeated one would end the rounds sooner
    messages_server.responder = lambda body: (
        text("giving up on tools")
        if body.get("tool_choice", {}).get("type") == "none"
        else tool_use("memory_query", {"query": f"again {next(asked)}"})
    )
    report = Brain(db, s, make_client(s)).drain()
    assert report.completed == 1
    assert len(messages_server.requests) == 6  # 5 tool rounds, then one call with tools off
    assert messages_server.requests[-1]["tool_choice"] == {"type": "none"}
    assert db.run(outbox.waiting)[0]["text"] == "giving up on tools"
