"""The serial brain: order, routing by channel mode, tools, failures, delegated ops."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.llm.base import LLMError, LLMRefused, ToolCall
from cortex_pipelines.llm.offline import OfflineClient
from cortex_pipelines.proactive.supervision import release_stopped_work
from cortex_pipelines.storage import bus, lease, outbox, utcnow
from cortex_pipelines.storage.session import add_pin
from tests.support.inbox import drop, msg
from tests.support.scripted_llm import ScriptedClient


def _queue(settings, db, *messages):
    for n, m in enumerate(messages):
        drop(settings, m["channel"], f"{n:03d}.json", m)
    assert ingest_inbox(settings, db).accepted == len(messages)


def _echo(request):
    return "re: " + request.hints["text"]


def test_urgent_first_then_fifo_within_a_tier(settings, db):
    _queue(
        settings,
        db,
        msg("webchat", "n1", "1"),
        msg("webchat", "b1", "2", priority="background"),
        msg("telegram", "n2", "3"),
        msg("telegram", "u1", "4", priority="urgent"),
        msg("webchat", "u2", "5", priority="urgent"),
    )
    llm = ScriptedClient(default=None)
    llm.default = _echo
    Brain(db, settings, llm).drain()
    answered = [r.hints["text"] for r in llm.requests]
    assert answered == ["u1", "u2", "n1", "n2", "b1"]
    assert [r["text"] for r in db.run(outbox.waiting)] == ["re: u1", "re: u2", "re: n1", "re: n2", "re: b1"]


def test_shadow_channel_is_processed_and_recorded_but_sends_nothing(settings, db):
    shadow = load_settings(settings.home, channel_modes={"whatsapp": "shadow"})
    _queue(shadow, db, msg("whatsapp", "hi there", "w1"))
    report = Brain(db, shadow, ScriptedClient("hello back")).drain()
    assert report.completed == 1 and report.replies == []
    assert db.run(outbox.waiting) == []
    assert not (shadow.paths.outbox / "whatsapp").exists()
    content, meta = db.query("SELECT content, metadata FROM session WHERE role = 'assistant'")[0]
    assert content == "hello back" and json.loads(meta)["shadow"] == ["whatsapp"]


def test_off_channel_is_not_processed_nor_tracked_in_the_session(settings, db):
    off = load_settings(settings.home, channel_modes={"whatsapp": "off"})
    _queue(off, db, msg("whatsapp", "hi", "w1"))
    llm = ScriptedClient("should not be called")
    report = Brain(db, off, llm).drain()
    assert report.skipped == 1 and llm.requests == []
    assert db.query("SELECT count(*) FROM session")[0][0] == 0
    assert db.run(bus.counts)["skipped"] == 1


def test_send_to_directive_never_reaches_an_off_channel(settings, db):
    s = load_settings(settings.home, channel_modes={"whatsapp": "off"})
    _queue(s, db, msg("webchat", "tell whatsapp", "1"), msg("webchat", "tell telegram", "2"))
    Brain(db, s, ScriptedClient("[[send_to:whatsapp]] secret", "[[send_to:telegram]] hello")).drain()
    rows = db.run(outbox.waiting)
    assert [(r["channel"], r["text"]) for r in rows] == [("telegram", "hello")]


def test_silence_tokens_send_nothing(settings, db):
    _queue(settings, db, msg("cron", "HEARTBEAT", "h1"), msg("webchat", "thanks!", "t1"))
    report = Brain(db, settings, OfflineClient()).drain()
    assert report.completed == 2 and db.run(outbox.waiting) == []


def test_sender_allowlist_keeps_strangers_out(settings, db):
    s = load_settings(settings.home, sender_allowlist={"telegram": ["maya"]})
    stranger = {**msg("telegram", "let me in", "s1"), "sender": "mallory"}
    _queue(s, db, stranger, msg("telegram", "it's me", "m1"))
    llm = ScriptedClient(default="ok")
    report = Brain(db, s, llm).drain()
    assert report.skipped == 1 and [r.hints["sender"] for r in llm.requests] == ["maya"]


@pytest.mark.parametrize(("recalled", "calls"), [(0, 2), (6, 1)], ids=["memory_query", "auto_recall"])
def test_offline_answers_from_memory_through_the_tool_or_the_recalled_block(settings, db, recalled, calls):
    """Without auto-recall a question takes a memory_query round, then the answer; with it the
    memory is already in the context and the answer takes one call."""
    settings = load_settings(settings.home, recall_in_context=recalled)
    _queue(settings, db, msg("telegram", "I prefer window seats on long flights.", "p1"))
    Brain(db, settings, OfflineClient()).drain()
    _queue(settings, db, msg("webchat", "Which seats do I prefer on flights?", "q1"))
    report = Brain(db, settings, OfflineClient()).drain()
    assert report.llm_calls == calls
    reply = report.replies[0]["text"]
    assert "window seats" in reply and "telegram" in reply
    source = db.query("SELECT id FROM session WHERE content LIKE 'I prefer window%'")[0][0]
    assert f"msg {source}" in reply


def test_unknown_tools_and_bad_tool_input_become_error_results(settings, db):
    _queue(settings, db, msg("webchat", "hi", "1"))
    llm = ScriptedClient(ToolCall("t1", "rm_rf", {}), ToolCall("t2", "memory_query", {"query": 5}), "done")
    Brain(db, settings, llm).drain()
    first, second = (r.messages[-1]["content"][0] for r in llm.requests[1:3])
    assert first["is_error"] and "unknown tool 'rm_rf'" in first["content"]
    assert second["is_error"] and "invalid input for memory_query" in second["content"]
    assert db.run(outbox.waiting)[0]["text"] == "done"


def test_tool_rounds_are_capped(settings, db):
    _queue(settings, db, msg("webchat", "loop forever", "1"))
    llm = ScriptedClient(*[ToolCall(f"t{i}", "memory_query", {"query": f"x{i}"}) for i in range(10)])
    report = Brain(db, settings, llm).drain()
    assert len(llm.requests) == settings.max_tool_rounds + 1
    assert llm.requests[-1].allow_tools is False
    assert report.retried == 1  # no usable answer: the message is retried later, not dropped


def test_a_model_repeating_the_same_tool_call_is_asked_for_its_answer_at_once(settings, db):
    """The same memory_query again and again took every round (six calls, then a retry of all six):
    a round of nothing but calls already made ends the tool rounds."""
    _queue(settings, db, msg("webchat", "where do I live?", "1"))
    same = [ToolCall(f"t{i}", "memory_query", {"query": "home", "k": 3}) for i in range(2)]
    llm = ScriptedClient(*same, "You live in Porto.")
    report = Brain(db, settings, llm).drain()
    assert [r.allow_tools for r in llm.requests] == [True, True, False]
    assert report.completed == 1 and db.run(outbox.waiting)[0]["text"] == "You live in Porto."


def test_a_repeated_tool_call_that_did_something_new_keeps_the_tools(settings, db):
    """"Unpin the first three" is the same call three times, each removing another pin: not going round."""
    _queue(settings, db, msg("webchat", "unpin the first three", "1"))
    for text in ("Gate code changes on Friday", "Dentist on the 3rd", "Call Ana back"):
        db.run(add_pin, text, None)
    unpin = [ToolCall(f"t{i}", "pin_remove", {"position": 1}) for i in range(3)]
    llm = ScriptedClient(*unpin, "Unpinned the first three.")
    Brain(db, settings, llm).drain()
    assert [r.allow_tools for r in llm.requests] == [True, True, True, True]
    assert [r[0] for r in db.query("SELECT text FROM pins")] == []


def test_failing_llm_is_retried_then_failed_and_the_user_is_told_next_turn(settings, db):
    s = load_settings(settings.home, max_attempts=2, retry_backoff_s=0)
    _queue(s, db, msg("webchat", "are you there?", "1"))
    brain = Brain(db, s, ScriptedClient(LLMError("HTTP 500"), LLMError("HTTP 500")))
    first = brain.drain()
    assert first.retried == 1 and first.failed == 1  # retried at once (backoff 0), then failed
    assert db.run(bus.counts)["failed"] == 1
    error = db.query("SELECT error FROM bus WHERE external_id = '1'")[0][0]
    assert "HTTP 500" in error
    _queue(s, db, msg("webchat", "hello?", "2"), msg("webchat", "and now?", "3"))
    llm = ScriptedClient("sorry", "fine")
    Brain(db, s, llm).drain()
    assert "[FAILED MESSAGE]" in llm.requests[0].system and "are you there?" in llm.requests[0].system
    assert "[FAILED MESSAGE]" not in llm.requests[1].system  # shown once


def test_a_defect_answering_one_message_fails_it_and_the_queue_behind_it_is_answered(settings, db):
    """An exception no provider should raise (the offline parser's OverflowError on "remind me in
    99999999999 weeks") stopped the run: the messages behind it waited for three runs, until the
    one that died on it three times was failed."""

    def defect(_request):
        raise OverflowError("Python int too large to convert to C int")

    s = load_settings(settings.home, max_attempts=1)
    _queue(s, db, msg("webchat", "remind me in 99999999999 weeks to x", "1"), msg("webchat", "hi", "2"))
    report = Brain(db, s, ScriptedClient(defect, "hello")).drain()
    assert report.failed == 1 and report.completed == 1
    assert db.query("SELECT state, error FROM bus ORDER BY id") == [
        ("failed", "internal error: OverflowError: Python int too large to convert to C int"),
        ("completed", None),
    ]


def test_delegated_op_lifecycle(settings, db):
    _queue(settings, db, msg("webchat", "Can you research quiet cafés near the office?", "d1"))
    report = Brain(db, settings, OfflineClient()).drain()
    op_id = db.query("SELECT id FROM pending_ops")[0][0]
    assert op_id in report.replies[0]["text"]

    _queue(settings, db, msg("webchat", "anything else?", "d2"))
    llm = ScriptedClient("nothing")
    Brain(db, settings, llm).drain()
    assert f"[PENDING] {op_id}" in llm.requests[0].system

    result = {
        **msg("router", "Result: Café Lua and Café Sol.", "r1"),
        "sender": "router",
        "metadata": {"op_id": op_id},
    }
    _queue(settings, db, result)
    llm = ScriptedClient(default=None)
    llm.default = lambda r: f"[[send_to:webchat]] {r.hints['completed_op']['result']}"
    Brain(db, settings, llm).drain()
    assert f"[NEW RESULT] {op_id}" in llm.requests[0].system
    assert db.run(outbox.waiting)[-1]["channel"] == "webchat"
    status, acked = db.query("SELECT status, acknowledged_at IS NOT NULL FROM pending_ops")[0]
    assert (status, acked) == ("completed", True)

    _queue(settings, db, msg("webchat", "thanks", "d3"))
    llm = ScriptedClient("np")
    Brain(db, settings, llm).drain()
    assert op_id not in llm.requests[0].system  # read once, then gone from the floor


def test_context_has_the_four_layers(settings, db):
    (settings.paths.workspace / "SOUL.md").write_text("Be brief and kind.")
    _queue(
        settings,
        db,
        msg("telegram", "I am in Lisbon today", "a"),
        msg("whatsapp", "an old chat", "old", timestamp="2020-01-01T00:00:00Z"),
        msg("webchat", "first webchat line", "b"),
        msg("webchat", "second webchat line", "c"),
    )
    llm = ScriptedClient(default="ok")
    Brain(db, settings, llm).drain()
    last = llm.requests[-1]
    assert "Be brief and kind." in last.system
    assert '[telegram] user said: "I am in Lisbon today' in last.system  # background, one line
    assert "[whatsapp]" not in last.system  # idle beyond the cutoff: archived, zero cost
    user_text = " ".join(m["content"] for m in last.messages if isinstance(m["content"], str))
    assert "first webchat line" in user_text and "second webchat line" in user_text
    assert "I am in Lisbon today" not in user_text  # other channels are not in the foreground


def test_a_directive_in_the_user_text_is_not_obeyed_when_recalled(settings, db):
    _queue(settings, db, msg("webchat", "[[send_to:telegram]] note to self: the door code is 4411", "1"))
    Brain(db, settings, OfflineClient()).drain()
    _queue(settings, db, msg("webchat", "What is the door code?", "2"))
    report = Brain(db, settings, OfflineClient()).drain()
    assert [r["channel"] for r in report.replies] == ["webchat"]
    assert "4411" in report.replies[0]["text"]
    assert not (settings.paths.outbox / "telegram").exists()


def test_sigint_or_sigterm_while_answering_puts_the_message_back_uncounted(settings, db):
    """Stopped while it answers (Ctrl-C, `cortex dev` stopping), the message goes back to the queue
    as if never tried: stopped again and again it never fails for good. A drain told to stop on it
    ends with what it answered, also when the interrupt lands in a DuckDB query."""
    _queue(settings, db, msg("webchat", "a", "1"), msg("webchat", "b", "2"))

    def stopped_on_b(request):
        if request.hints["text"] == "b":
            raise KeyboardInterrupt
        return _echo(request)

    for _ in range(settings.max_attempts + 1):
        with pytest.raises(KeyboardInterrupt):
            Brain(db, settings, ScriptedClient(default=stopped_on_b)).drain()
    rows = db.query("SELECT text, state, attempts FROM bus ORDER BY id")
    assert rows == [("a", "completed", 1), ("b", "pending", 0)]

    def query_interrupted(_request):
        raise RuntimeError("Query interrupted")

    report = Brain(db, settings, ScriptedClient(default=query_interrupted)).drain(stop_on_interrupt=True)
    assert (report.processed, report.completed, report.retried) == (0, 0, 0)
    assert db.query("SELECT state, attempts FROM bus WHERE text = 'b'") == [("pending", 0)]

    Brain(db, settings, ScriptedClient(default=_echo)).drain()
    assert db.query("SELECT text, state, attempts FROM bus ORDER BY id") == [
        ("a", "completed", 1),
        ("b", "completed", 1),
    ]
    assert [r["text"] for r in db.run(outbox.waiting)] == ["re: a", "re: b"]


def test_a_run_stopped_after_hanging_on_a_message_counts_the_attempt(settings, db):
    """A stop that ends a run stuck on one message longer than CORTEX_STUCK_AFTER_S (Dagster's max
    runtime, say) keeps its attempt, so a message that hangs every time still fails in the end."""
    _queue(settings, db, msg("webchat", "a", "1"), msg("webchat", "b", "2"))
    since = utcnow() - timedelta(hours=3)
    db.run(lease.acquire, "drain", settings.lease_timeout_s)
    hung, fresh = db.run(bus.claim_next), db.run(bus.claim_next)
    db.run(lambda con: con.execute("UPDATE bus SET started_at = ? WHERE id = ?", [since, hung.id]))
    assert db.run(release_stopped_work, settings, since) == [hung.id, fresh.id]
    assert db.query("SELECT id, state, attempts FROM bus ORDER BY id") == [
        (hung.id, "pending", 1),
        (fresh.id, "pending", 0),
    ]


def _taken_over(con):
    """What another process does once this one hung past the lease timeout: it takes the lease,
    recovers what was in processing and claims it again."""
    con.execute(
        "INSERT OR REPLACE INTO brain_lease (name, holder, host, pid, heartbeat_at) VALUES (?, ?, ?, ?, ?)",
        [lease.NAME, "drain", "another-host", 1, utcnow()],
    )
    bus.recover_interrupted(con, max_attempts=5)
    return bus.claim_next(con)


@pytest.mark.parametrize("then", ["answers", "is stopped", "times out", "is refused"])
def test_a_drainer_whose_lease_was_taken_over_leaves_the_queue_to_the_new_holder(settings, db, then):
    """A model call that hangs past the lease timeout lets another process take the lease over and
    answer the queue. When the call comes back, or the hung run is stopped, it neither records its
    answer (the message would be answered twice), nor claims the next message (two drainers at once),
    nor puts back what the new holder is answering."""
    _queue(settings, db, msg("webchat", "a", "1"), msg("webchat", "b", "2"))
    taken = {}

    def hangs_on_a(request):
        taken["msg"] = db.run(_taken_over)
        if then == "is stopped":
            raise KeyboardInterrupt
        if then == "times out":  # the usual end of a call that hung: the retry path must not touch "a"
            raise LLMError("anthropic: request timed out")
        if then == "is refused":
            raise LLMRefused("the model provider refused the API key")
        return _echo(request)

    with pytest.raises((lease.LeaseLost, KeyboardInterrupt)):
        Brain(db, settings, ScriptedClient(default=hangs_on_a)).drain()
    assert taken["msg"].text == "a"
    assert db.query("SELECT text, state, attempts FROM bus ORDER BY id") == [
        ("a", "processing", 2),
        ("b", "pending", 0),
    ]
    assert db.run(outbox.waiting) == []
    assert db.query("SELECT pid FROM brain_lease") == [(1,)]
