"""The admin chat (driven through a real pseudo-terminal), pattern observations from a fixture week,
and the issue's end-to-end reminder: send, run, move the clock, the reminder is in the outbox once."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import socket
import subprocess
import termios
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from cortex_pipelines.admin.chat import AdminChat
from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.llm.base import ToolCall
from cortex_pipelines.llm.offline import OfflineClient
from cortex_pipelines.memory import control
from cortex_pipelines.memory.embedder import get_embedder
from cortex_pipelines.memory.observations import observe
from cortex_pipelines.memory.pipeline import extract_new_facts
from cortex_pipelines.memory.vectors import vector_store
from tests.support.cli import cli_argv, cli_env, cortex
from tests.support.inbox import drop, msg
from tests.support.scripted_llm import ScriptedClient


def _embedder(settings):
    return get_embedder(settings.embedding_model, settings.embedding_device, settings.embedding_batch_size)


def _remember_window_seats(settings, db) -> None:
    drop(settings, "telegram", "a.json", msg("telegram", "On flights I prefer window seats.", "t1"))
    ingest_inbox(settings, db)
    Brain(db, settings, OfflineClient()).drain()
    extract_new_facts(db, vector_store(settings.paths.lance), _embedder(settings), settings, None)


def _own_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is the pseudo-terminal, so the
    terminal turns Ctrl-C into SIGINT as a real one does."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _own_terminal_sigint_ignored() -> None:
    """As a script's background job starts: SIGINT ignored, inherited through exec."""
    _own_terminal()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Terminal:
    """`cortex chat` on a pseudo-terminal, as a user at a keyboard would run it."""

    def __init__(self, home: Path, sigint_ignored: bool = False):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            cli_argv("chat"),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=cli_env(home),
            cwd=home.parent,
            preexec_fn=_own_terminal_sigint_ignored if sigint_ignored else _own_terminal,
        )
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout_s: float = 120) -> str:
        deadline = time.monotonic() + timeout_s
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} did not appear; the terminal shows:\n{self.seen}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode("utf-8", "replace")
                except OSError:  # the child closed the terminal
                    raise AssertionError(f"{text!r} never appeared before exit:\n{self.seen}") from None
        start = self.seen.index(text)
        shown, self.seen = self.seen[: start + len(text)], self.seen[start + len(text) :]
        return shown

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def interrupt(self) -> None:
        """Ctrl-C (the terminal sends SIGINT) once the chat waits for a key. Sent in the instant
        between the prompt and that wait, as a loaded machine made this test do, Python's readline
        notes the signal and raises it only after the next key: no person types that fast."""
        self._wait_until_reading()
        os.write(self.master, b"\x03")

    def _wait_until_reading(self, timeout_s: float = 30) -> None:
        wchan = Path(f"/proc/{self.proc.pid}/wchan")
        deadline = time.monotonic() + timeout_s
        while wchan.exists() and time.monotonic() < deadline:
            if any(wait in wchan.read_text() for wait in ("poll", "select", "tty_read")):
                return
            time.sleep(0.02)

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        finally:
            os.close(self.master)


def test_cortex_chat_answers_slash_recall_and_a_plain_question_on_a_terminal(settings, db):
    _remember_window_seats(settings, db)
    term = Terminal(settings.home)
    try:
        term.expect("you> ")
        term.type("/recall window seat")
        answer = term.expect("you> ")
        assert "On flights I prefer window seats." in answer and "fact " in answer

        term.type("what kind of seat do I like on flights?")
        answer = term.expect("you> ")
        assert "cortex> Here's what I have:" in answer and "window seats" in answer

        term.type("/unschedule sch-00000000")
        assert "no active schedule sch-00000000" in term.expect("you> ")
        term.type("/quit")
        assert term.close() == 0
    finally:
        term.proc.kill()
    # The question went through the bus on the admin channel and was answered there, not exported.
    rows = db.query("SELECT channel, sender, state FROM bus WHERE channel = 'admin'")
    assert rows == [("admin", "owner", "completed")]
    assert not (settings.paths.outbox / "admin").exists()


def test_ctrl_c_leaves_cortex_chat_after_an_answer(settings):
    """Answering runs queries whose library (polars) replaced Python's SIGINT handler with one that
    restarts the terminal's read: Ctrl-C at the next prompt did nothing until Enter."""
    term = Terminal(settings.home)
    try:
        term.expect("you> ")
        term.type("I prefer window seats on long flights.")
        term.expect("cortex> ")
        term.expect("you> ")
        term.interrupt()
        assert term.close() == 0
    finally:
        term.proc.kill()


@pytest.mark.soak
def test_ctrl_c_stops_cortex_chat_started_with_sigint_ignored(settings):
    """A script's `cortex … &` starts with SIGINT ignored. Dagster stops runs and `cortex dev` its
    children by SIGINT, so every command arms it again: here Ctrl-C still quits the chat."""
    term = Terminal(settings.home, sigint_ignored=True)
    try:
        term.expect("you> ")
        term.interrupt()
        assert term.close() == 0
    finally:
        term.proc.kill()


def test_admin_chat_waits_for_a_running_drainer_instead_of_competing(settings, db):
    sleeper = subprocess.Popen(["sleep", "30"])  # stands in for a `cortex dev` run holding the lease
    try:
        db.run(
            lambda con: con.execute(
                "INSERT INTO brain_lease VALUES ('brain', 'drain', ?, ?, now()::TIMESTAMP)",
                [socket.gethostname(), sleeper.pid],
            )
        )
        chat = AdminChat(settings, ScriptedClient("all quiet"), wait_s=60)
        started = time.monotonic()
        released = threading.Timer(1.5, lambda: (sleeper.kill(), sleeper.wait()))  # the run ends
        released.start()
        assert chat.ask("anything stuck?") == "all quiet"
        assert time.monotonic() - started >= 1.5  # nothing ran while the other drainer held the lease
    finally:
        sleeper.kill()
        sleeper.wait()


def test_admin_channel_has_the_full_toolset(settings, db):
    overview = {"recent_runs": [{"job": "cortex_main", "status": "SUCCESS"}]}
    llm = ScriptedClient(
        ToolCall("t1", "system_inspect", {}),
        ToolCall("t2", "memory_save", {"text": "My sister Ana lives in Porto.", "category": "identity"}),
        "done",
    )
    chat = AdminChat(settings, llm, inspect=lambda: overview)
    assert chat.ask("check the system and remember my sister") == "done"
    assert {"system_inspect", "memory_save", "schedule_create"} <= {t.name for t in llm.requests[0].tools}
    inspected = json.loads(llm.requests[1].messages[-1]["content"][0]["content"])
    assert inspected["dagster"] == overview and inspected["bus"]["processing"] == 1
    saved = json.loads(llm.requests[2].messages[-1]["content"][0]["content"])
    fact_id = saved["fact_id"]
    assert saved["new"]
    assert "/recall QUERY" in chat.handle("/help")
    assert "My sister Ana lives in Porto." in chat.handle("/recall where does my sister live")
    assert chat.handle(f"/forget {fact_id}") == f"forgot fact {fact_id}"
    assert chat.handle("/forget twelve").startswith("wrong arguments")


def _week(settings) -> None:
    """Seven days of a user: Helios on five days, Lisbon on two channels, mornings 08-10 UTC."""
    start = datetime(2026, 11, 16, 8, 0)
    lines = {
        0: ("webchat", "I live in Lisbon and work on the Helios redesign ok Had a call about it."),
        1: ("telegram", "Is the Helios review still on? Lisbon is rainy today, sunny in New York."),
        2: ("webchat", "Helios wants a darker chart and a new logo lol Had to laugh."),
        3: ("telegram", "Coffee first, then the Helios dashboard k Had to. Still thinking of New York."),
        4: ("webchat", "What is left on Helios before the deadline?"),
        5: ("webchat", "Lazy Saturday at home, had a nap in the new chair. Flights to New York are cheap."),
    }
    for day, (channel, text) in lines.items():
        when = start + timedelta(days=day, minutes=10 * day)
        drop(
            settings,
            channel,
            f"{day}.json",
            msg(channel, text, f"d{day}", timestamp=when.isoformat() + "+00:00"),
        )


def test_observations_from_a_fixture_week_carry_their_sources(settings, db, monkeypatch):
    _week(settings)
    ingest_inbox(settings, db)
    Brain(db, settings, OfflineClient()).drain()
    vectors, embedder = vector_store(settings.paths.lance), _embedder(settings)
    report = observe(db, vectors, embedder, settings, None)
    texts = {o.text: o for o in report.found}
    # "Had" after unpunctuated chat on three days is a word the user also writes in lower case
    assert not [t for t in texts if "Had" in t], list(texts)
    # ... while "new" in lower case does not take "New York" with it
    assert "The user keeps coming back to New York: it comes up on several days a week." in texts, list(texts)
    helios = texts["The user keeps coming back to Helios: it comes up on several days a week."]
    lisbon = texts["Lisbon matters to the user: it comes up on more than one channel."]
    mornings = texts["The user is usually active between 08:00 and 10:00 (UTC)."]
    turn_text = dict(db.query("SELECT id, content FROM session WHERE role = 'user'"))
    assert len(helios.sources) == 5 and all("Helios" in turn_text[i] for i in helios.sources)
    assert lisbon.channels == ("telegram", "webchat") and all(
        "Lisbon" in turn_text[i] for i in lisbon.sources
    )
    assert len(mornings.sources) == 6
    facts = db.query_dicts("SELECT text, category, sources FROM facts WHERE origin = 'observation'")
    assert {f["text"] for f in facts} == set(texts) and all(f["category"] == "observation" for f in facts)
    assert {tuple(f["sources"]) for f in facts} == {o.sources for o in report.found}
    monkeypatch.setenv("CORTEX_NOW", "2026-11-22T12:00:00Z")  # the day after the week
    recent = control.recent(db, settings, limit=50)
    assert recent and not [i for i in recent if i.kind == "fact"]  # the turns: patterns are not news

    # Unchanged evidence: nothing new is written, and the LLM path would not be called.
    llm = ScriptedClient("[]")
    again = observe(db, vectors, embedder, settings, llm)
    assert not again.changed and llm.requests == []


def test_observations_llm_path_runs_once_per_change_of_evidence(settings, db):
    _week(settings)
    ingest_inbox(settings, db)
    Brain(db, settings, OfflineClient()).drain()
    llm = ScriptedClient('[{"index": 0, "text": "Helios is the project the user works on most."}]')
    vectors, embedder = vector_store(settings.paths.lance), _embedder(settings)
    first = observe(db, vectors, embedder, settings, llm)
    assert first.llm_calls == 1 and [o.text for o in first.found] == [
        "Helios is the project the user works on most."
    ]
    assert observe(db, vectors, embedder, settings, llm).llm_calls == 0
    assert len(llm.requests) == 1


@pytest.mark.timeout(600)
def test_remind_me_in_two_minutes_arrives_once_when_the_time_comes(tmp_path):
    home = tmp_path / "home"
    cortex("send", "webchat", "remind me in 2 minutes to stretch", home=home)
    first = cortex("run", home=home).stdout
    assert "I'll remind you" in first and "stretch" in first
    (job,) = json.loads(cortex("schedules", "--json", home=home).stdout)
    assert job["when"] == "once" and job["target_channel"] == "webchat"

    later = cortex("--now", "+3m", "run", home=home).stdout  # due on the next whole minute after 2
    assert "fired 1 schedule(s)" in later and "Reminder: stretch" in later
    cortex("--now", "+10m", "run", home=home)  # later runs do not fire it again

    replies = json.loads(cortex("outbox", "webchat", "--json", home=home).stdout)
    assert [r["text"].startswith("Reminder: stretch") for r in replies].count(True) == 1
    assert json.loads(cortex("schedules", "--json", home=home).stdout) == []
    state = json.loads(cortex("status", "--json", home=home).stdout)
    assert state["supervision"]["last_check_at"] is not None and state["supervision"]["findings"] == {
        "stuck_message": 0,
        "overdue_op": 0,
        "hung_run": 0,
    }
    bad = cortex("--now", "next tuesday", "status", home=home, check=False)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert bad.stderr.startswith("cortex: --now: 'next tuesday' is neither")  # the option typed


@pytest.mark.soak
@pytest.mark.timeout(600)
def test_the_demo_creates_its_reminder_and_its_observations_are_recallable(tmp_path):
    home = tmp_path / "home"
    cortex("run", "--demo", home=home)
    (job,) = json.loads(cortex("schedules", "--json", home=home).stdout)
    assert job["when"] == "cron 0 9 * * 1" and "timesheet" in job["description"]
    # Listed in words, with the cron for the exact rule (was "cron 0 9 * * 1" alone).
    assert job["repeats"] == "at 09:00, only on Monday"
    assert "at 09:00, only on Monday (cron 0 9 * * 1)  → webchat" in cortex("schedules", home=home).stdout
    settings = load_settings(home, llm_provider="offline")
    listed = AdminChat(settings, OfflineClient()).handle("/schedules")
    assert listed.startswith(job["id"]) and listed.endswith(", at 09:00, only on Monday (cron 0 9 * * 1)")
    hits = json.loads(cortex("recall", "when is the user usually active", "--json", home=home).stdout)
    assert any(h["text"].startswith("The user is usually active between") for h in hits[:3]), hits
    helios = json.loads(
        cortex("recall", "what does the user keep coming back to", "--json", home=home).stdout
    )
    # Turns sharing only "keep" with this vague question once outranked the observation; a full-text
    # hit now counts by the share of the query's words it says (RecallConfig.fts_coverage).
    assert any("keeps coming back to Helios" in h["text"] and len(h["sources"]) >= 5 for h in helios), helios
