"""The anthropic provider end to end: the real SDK against a local Messages API server."""

from __future__ import annotations

import pytest

from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.llm import make_client
from cortex_pipelines.storage import bus, outbox, usage
from cortex_pipelines.storage.session import add_pin
from tests.support.cli import cortex
from tests.support.inbox import drop, msg
from tests.support.messages_server import MessageReply, MessagesServer, error, raw, text, tool_use


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
    assert first["model"] == "claude-test" and "You are Cortex" in first["system"][0]["text"]
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
    drop(s, "webchat", "a.jsonl", msg("webchat", "hello", "1"), msg("webchat", "what's on today?", "2"))
    ingest_inbox(s, db)
    messages_server.script(text("hi!"), error(500))
    report = Brain(db, s, make_client(s)).drain()
    assert report.failed == 1
    assert db.run(bus.counts)["failed"] == 1
    answered, failed = db.query("SELECT id FROM bus ORDER BY id")
    assert "HTTP 500" in db.query("SELECT error FROM bus WHERE state = 'failed'")[0][0]
    assert db.query("SELECT ok FROM llm_usage ORDER BY ok") == [(False,), (True,)]

    # `cortex retry` lists what failed and why; it tells a wrong id from one that did not fail
    listed = cortex("retry", home=s.home).stdout.splitlines()
    assert listed[0].startswith(f"#{failed[0]} webchat (1 attempt(s)): ") and "HTTP 500" in listed[0]
    assert listed[1:] == ["    what's on today?", "`cortex retry ID` or `--all-failed` puts them back"]
    wrong = [cortex("retry", str(n), home=s.home, check=False) for n in (answered[0], 999)]
    assert [(p.returncode, p.stderr.strip()) for p in wrong] == [
        (2, f"cortex: message {answered[0]} is completed, not failed or skipped"),
        (2, "cortex: no message 999"),
    ]
    requeued = cortex("retry", str(failed[0]), home=s.home).stdout.strip()
    assert requeued == f"requeued 1 message(s): {failed[0]}"
    assert cortex("retry", home=s.home).stdout.strip() == "no failed messages"


def _system_text(request: dict) -> list[tuple[str, bool]]:
    return [(block["text"], "cache_control" in block) for block in request["system"]]


def test_the_stable_prefix_is_cached_and_the_next_message_reads_it(settings, db, messages_server):
    """Persona, workspace files, bulletin, facts and pins come first with a cache breakpoint after
    them; the time and the rest follow, so the second message reads the first one's prefix."""
    s = _anthropic(settings, messages_server)
    s.paths.workspace.mkdir(parents=True, exist_ok=True)
    (s.paths.workspace / "SOUL.md").write_text("Be brief and kind. " * 200)
    s.paths.memory_bulletin.write_text("# Memory Bulletin\n\n- Maya likes green tea (src 1)\n")
    db.run(add_pin, "passport renewal due in March", "todo")
    drop(s, "webchat", "a.json", msg("webchat", "hello there", "1"))
    drop(s, "webchat", "b.json", msg("webchat", "and hello again", "2"))
    ingest_inbox(s, db)
    messages_server.script(text("Hi."), text("Hi again."))
    assert Brain(db, s, make_client(s)).drain().completed == 2

    for request in messages_server.requests:
        blocks = _system_text(request)
        last_cached = max(i for i, (_, cached) in enumerate(blocks) if cached)
        assert "You are Cortex" in blocks[0][0] and "Be brief and kind." in blocks[0][0]
        assert blocks[1][1] and "green tea" in blocks[1][0] and "passport renewal" in blocks[1][0]
        assert not any("Now:" in text for text, _ in blocks[: last_cached + 1])
        assert blocks[last_cached + 1][0].startswith("Now: ")  # the time only after the stable prefix

    rows = db.query(
        "SELECT input_tokens, cache_creation_input_tokens, cache_read_input_tokens FROM llm_usage ORDER BY id"
    )
    (_, written, read_first), (_, written_again, read) = rows
    assert written > 1000 and read_first == 0  # the first message writes the prefix...
    assert read == written and written_again == 0  # ...the second reads all of it from the cache
    totals = db.run(usage.totals)
    assert totals["cache_read_input_tokens"] == read and totals["cache_creation_input_tokens"] == written


def test_prompt_caching_off_sends_the_system_prompt_as_text(settings, db, messages_server):
    s = _anthropic(settings, messages_server, prompt_caching=False)
    drop(s, "webchat", "a.json", msg("webchat", "hello", "1"))
    ingest_inbox(s, db)
    Brain(db, s, make_client(s)).drain()
    (request,) = messages_server.requests
    assert isinstance(request["system"], str) and "Now: " in request["system"]
    assert db.query("SELECT cache_creation_input_tokens, cache_read_input_tokens FROM llm_usage") == [(0, 0)]


def test_cortex_run_says_which_messages_it_could_not_answer_and_why(settings, messages_server):
    """A model error showed only as `bus: {'pending': 1, …}`, exit 0, and `cortex retry` said there
    was no failed message (QA, helper-55): the run now says what will be retried and what failed."""
    messages_server.responder = lambda _body: error(500)
    env = {**messages_server.cortex_env(), "CORTEX_LLM_RETRIES": "0"}
    cortex("send", "webchat", "What's on my calendar?", home=settings.home)
    held = cortex("run", home=settings.home, env=env, check=False).stderr  # extraction fails too
    assert "message #1 will be retried after" in held and "500" in held, held
    later = {**env, "CORTEX_MAX_ATTEMPTS": "1", "CORTEX_NOW": "+1h"}
    failed = cortex("run", home=settings.home, env=later, check=False).stderr
    assert "message #1 failed after 2 attempt(s)" in failed and "`cortex retry 1` tries again" in failed, (
        failed
    )


@pytest.mark.soak
def test_cortex_run_says_when_a_daily_budget_is_spent(settings, messages_server):
    """Over budget, replies came from the offline provider ("Noted.") and only Dagster's log said
    why (QA, helper-55)."""
    messages_server.responder = lambda _body: text("Sure, window seats it is.")
    env = {**messages_server.cortex_env(), "CORTEX_REPLY_DAILY_TOKEN_BUDGET": "1"}
    cortex("send", "webchat", "I prefer window seats", home=settings.home)
    first = cortex("run", home=settings.home, env=env)
    assert "Sure, window seats it is." in first.stdout
    cortex("send", "webchat", "Book me a window seat then", home=settings.home)
    spent = cortex("run", home=settings.home, env=env)
    assert "Sure, window seats it is." not in spent.stdout.split("Book me")[-1]
    assert (
        "today's reply token budget (1 tokens, CORTEX_REPLY_DAILY_TOKEN_BUDGET) is spent: the offline "
        "provider answers until midnight UTC"
    ) in spent.stderr, spent.stderr


def test_an_api_key_with_the_offline_provider_is_said_to_be_unused(settings):
    """Setting ANTHROPIC_API_KEY alone kept the offline provider and said nothing (QA, helper-55)."""
    cortex("send", "webchat", "hello", home=settings.home)
    run = cortex("run", home=settings.home, env={"ANTHROPIC_API_KEY": "sk-ant-test-key"})
    assert "an API key is set but CORTEX_LLM_PROVIDER is offline" in run.stderr
    assert "sk-ant-test-key" not in run.stdout + run.stderr


def test_a_key_the_server_echoes_in_its_error_is_never_stored_or_printed(tmp_path):
    """Some proxies name the key in their error body. It had been printed by `cortex run` and
    `cortex retry` and stored in cortex.duckdb and Dagster's run storage; now the error is one
    line with the key redacted, whether it looks like a known credential or not."""
    home = tmp_path / "home"
    key = "proxy-7f3a9c1e5b2d4a6f"  # the configured key: no known credential's shape
    said = {"type": "error", "error": {"type": "api_error", "message": f"upstream failed for key {key}"}}
    cortex("send", "webchat", "hello", home=home)
    with MessagesServer(responder=lambda _body: error(500, said)) as server:
        env = {
            **server.cortex_env(),
            "CORTEX_API_KEY": key,
            "CORTEX_LLM_RETRIES": "0",
            "CORTEX_MAX_ATTEMPTS": "1",
        }
        run = cortex("run", home=home, env=env, check=False)
    listed = cortex("retry", home=home).stdout

    assert key not in run.stdout + run.stderr and key not in listed
    assert "anthropic HTTP 500 api_error: upstream failed for key [redacted]" in listed
    assert not [f for f in home.rglob("*") if f.is_file() and key.encode() in f.read_bytes()]


def test_a_refused_api_key_is_one_line_and_uses_up_no_message(tmp_path):
    """A wrong key (401) used up every attempt of every message, and each run printed a step's
    AuthenticationError with `cortex doctor`'s hint (QA, helper-55). Now the run ends on one line
    naming the setting; the messages wait, their attempts not counted, for a run with a good key."""
    home = tmp_path / "home"
    key = "proxy-7f3a9c1e5b2d4a6f"
    said = {"type": "error", "error": {"type": "authentication_error", "message": f"Invalid API key: {key}"}}
    cortex("send", "webchat", "hello", home=home)
    cortex("send", "webchat", "are you there?", home=home)
    with MessagesServer(responder=lambda _body: error(401, said)) as server:
        env = {**server.cortex_env(), "CORTEX_API_KEY": key, "CORTEX_MAX_ATTEMPTS": "1"}
        runs = [cortex("run", home=home, env=env, check=False)]
        server.responder = lambda _body: text("Hello!")
        fixed = cortex("run", home=home, env=env)
    for run in runs:
        assert run.returncode == 1 and key not in run.stdout + run.stderr
        assert run.stderr.strip().splitlines()[-1] == (
            "cortex: the model provider refused the API key (HTTP 401 authentication_error: Invalid API "
            "key: [redacted]): check CORTEX_API_KEY (or ANTHROPIC_API_KEY); the messages wait, attempts "
            "not counted"
        ), run.stderr
        assert "cortex doctor" not in run.stderr
    assert fixed.stdout.count("Hello!") == 2, fixed.stdout
    assert not [f for f in home.rglob("*") if f.is_file() and key.encode() in f.read_bytes()]


def test_a_403_that_is_no_refused_key_fails_its_message_as_any_error(tmp_path):
    """A proxy's content filter answering one message with 403 is about that message: read as a
    refused key, it waited at the head of the queue uncounted for ever (review, helper-58)."""
    home = tmp_path / "home"
    cortex("send", "webchat", "a message the proxy blocks", home=home)
    blocked = raw(403, "<html>blocked by policy</html>", content_type="text/html")
    with MessagesServer(responder=lambda _body: blocked) as server:
        env = {**server.cortex_env(), "CORTEX_LLM_RETRIES": "0", "CORTEX_MAX_ATTEMPTS": "1"}
        run = cortex("run", home=home, env=env, check=False)
    assert "refused the API key" not in run.stderr
    assert "message #1 failed after 1 attempt(s): anthropic HTTP 403" in run.stderr, run.stderr


def test_a_tool_call_whose_input_is_no_object_is_answered_without_a_warning(settings, messages_server):
    """A model (or proxy) that sent a tool_use input as a string printed pydantic's serializer
    warning in `cortex run`, and the block went back to the API as it came, a string where the API
    takes an object (QA, helper-55). Its call runs with no arguments and is echoed so."""
    answers = iter(
        [MessageReply([{"type": "tool_use", "id": "toolu_1", "name": "memory_query", "input": "seats"}])]
    )
    messages_server.responder = lambda _body: next(answers, text("You like window seats."))
    cortex("send", "webchat", "Which seat do I like?", home=settings.home)
    run = cortex("run", home=settings.home, env=messages_server.cortex_env())
    assert "You like window seats." in run.stdout
    assert "Warning" not in run.stderr, run.stderr
    echoed = messages_server.requests[1]["messages"][-2]["content"][-1]
    assert echoed == {"type": "tool_use", "id": "toolu_1", "name": "memory_query", "input": {}}


def test_a_model_going_round_in_tool_calls_is_asked_for_its_answer_after_a_repeat(settings, messages_server):
    """A model that asks memory_query for the same thing again and again was given every tool round
    (six requests an attempt, and each retry six more). Once a round repeats calls already made, the
    next request allows no tool, and the answer it gives is sent."""

    def going_round(body):
        if body.get("tool_choice") == {"type": "none"}:
            return text("You like window seats.")
        return tool_use("memory_query", {"query": "seat preference"})

    messages_server.responder = going_round
    cortex("send", "webchat", "Which seat do I like?", home=settings.home)
    run = cortex("run", home=settings.home, env=messages_server.cortex_env())
    assert "You like window seats." in run.stdout
    answering = [r for r in messages_server.requests if "tools" in r]  # not the memory assets' calls
    assert [r.get("tool_choice") for r in answering] == [None, None, {"type": "none"}]
