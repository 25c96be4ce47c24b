"""The proactive brain: schedules that fire exactly once per due time (also across restarts, DST
and downtime), and supervision that leaves nothing stuck silently."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dagster import DagsterInstance

from cortex_pipelines import clock
from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.instance import status
from cortex_pipelines.llm.base import ToolCall
from cortex_pipelines.llm.offline import OfflineClient
from cortex_pipelines.proactive import english, schedules
from cortex_pipelines.proactive.supervision import supervise
from cortex_pipelines.sensors.scheduler import scheduler
from cortex_pipelines.sensors.supervision import supervision
from cortex_pipelines.storage import bus, lease, outbox
from cortex_pipelines.storage import ops as ops_store
from cortex_pipelines.storage import schedules as schedule_store
from tests.support.cli import cortex
from tests.support.inbox import drop, msg
from tests.support.messages_server import MessagesServer, message
from tests.support.messages_server import error as reply_error
from tests.support.messages_server import text as reply_text
from tests.support.scripted_llm import ScriptedClient
from tests.support.sensors import evaluate

BERLIN = ZoneInfo("Europe/Berlin")


def _at(monkeypatch, when: str) -> datetime:
    monkeypatch.setenv("CORTEX_NOW", when)
    return clock.now()


def _fire(db, settings) -> list[schedules.Firing]:
    return db.run(lambda con: schedules.fire_due(con, settings, clock.now()))


def _cron_rows(db) -> list[dict]:
    return db.query_dicts(
        "SELECT id, external_id, text, metadata, state FROM bus WHERE channel = 'cron' ORDER BY id"
    )


def _create_daily_review(settings, db, monkeypatch) -> str:
    """A user asks on webchat; the (scripted) model calls schedule_create; the job is stored."""
    _at(monkeypatch, "2026-03-23T07:00:00+00:00")  # Monday 08:00 in Berlin
    drop(settings, "webchat", "a.json", msg("webchat", "remind me every day at 9 to review my inbox", "w1"))
    ingest_inbox(settings, db)
    call = ToolCall(
        "t1",
        "schedule_create",
        {
            "description": "review the inbox",
            "action": "Remind the user to review their inbox.",
            "cron": "0 9 * * *",
            "timezone": "Europe/Berlin",
        },
    )
    llm = ScriptedClient(call, "Done: every day at 9.")
    Brain(db, settings, llm).drain()
    result = json.loads(llm.requests[1].messages[-1]["content"][0]["content"])
    assert result["next_fire"] == "2026-03-23T09:00+01:00" and result["target_channel"] == "webchat"
    return result["id"]


def test_a_tool_created_schedule_fires_once_per_due_time_across_a_restart(settings, db, monkeypatch):
    job_id = _create_daily_review(settings, db, monkeypatch)

    _at(monkeypatch, "2026-03-23T07:59:00+00:00")
    assert _fire(db, settings) == []  # not due yet

    _at(monkeypatch, "2026-03-23T08:00:20+00:00")
    with pytest.raises(RuntimeError):  # the process dies before the firing commits

        def crash(con):
            schedules.fire_due(con, settings, clock.now())
            raise RuntimeError("killed")

        db.run(crash)
    assert _cron_rows(db) == []  # nothing half-done

    first = _fire(db, settings)  # after the restart
    again = _fire(db, settings)  # a second tick (or a second sensor) at the same time
    assert [f.job_id for f in first] == [job_id] and not first[0].late and again == []
    rows = _cron_rows(db)
    assert len(rows) == 1 and rows[0]["external_id"] == f"{job_id}@2026-03-23T08:00Z"

    # The reply goes to the job's target channel, not to `cron`.
    llm = ScriptedClient("Time to review your inbox.")
    Brain(db, settings, llm).drain()
    assert llm.requests[0].hints["schedule"]["schedule_id"] == job_id
    assert [(r["channel"], r["text"]) for r in db.run(outbox.waiting)][-1] == (
        "webchat",
        "Time to review your inbox.",
    )


def test_firings_missed_while_down_are_delivered_once_and_marked_late(settings, db, monkeypatch):
    job_id = _create_daily_review(settings, db, monkeypatch)
    _at(monkeypatch, "2026-03-26T10:00:00+00:00")  # down since Monday: Mon, Tue, Wed, Thu 09:00 missed
    fired = _fire(db, settings)
    assert len(fired) == 1 and fired[0].late and fired[0].missed == 3
    assert fired[0].due_at == datetime(2026, 3, 26, 8, 0, tzinfo=UTC)  # the latest one, 09:00 CET
    meta = json.loads(_cron_rows(db)[0]["metadata"])
    assert meta["late"] is True and meta["missed"] == 3 and "late" in _cron_rows(db)[0]["text"]
    assert _fire(db, settings) == []
    job = db.run(schedule_store.schedule_by_id, job_id)
    assert job["late_count"] == 1 and job["next_fire_at"] == datetime(2026, 3, 27, 8, 0)

    reply = Brain(db, settings, OfflineClient()).drain()
    assert reply.replies[0]["channel"] == "webchat"
    # One reply for four missed days, and it says so.
    assert "(this was due Thu 26 Mar at 09:00, and 3 time(s) before that; I'm" in reply.replies[0]["text"]


def test_firings_missed_while_down_are_told_when_the_latest_is_on_time(settings, db, monkeypatch):
    """Back up just as a firing falls due: that one is on time, but the three before it were missed,
    and the reply had said nothing of them (QA, helper-48)."""
    job_id = _create_daily_review(settings, db, monkeypatch)
    _at(monkeypatch, "2026-03-26T08:00:05+00:00")  # Thursday 09:00:05 CET: Mon, Tue, Wed missed
    fired = _fire(db, settings)
    assert [(f.job_id, f.late, f.missed) for f in fired] == [(job_id, False, 3)]
    assert "3 earlier firing(s)" in _cron_rows(db)[0]["text"]  # what a model is told
    reply = Brain(db, settings, OfflineClient()).drain()
    assert "(I was not running for the 3 time(s) before this one)" in reply.replies[0]["text"]


def test_daily_nine_oclock_in_berlin_keeps_its_wall_clock_across_the_march_change(settings, db, monkeypatch):
    now = _at(monkeypatch, "2026-03-27T12:00:00+00:00")
    request = schedules.ScheduleRequest(
        description="stand-up", action="Stand-up time.", cron="0 9 * * *", timezone="Europe/Berlin"
    )
    job = db.run(schedules.create, request, settings, now, "telegram")
    due_times = []
    for _ in range(4):
        nxt = db.run(schedule_store.schedule_by_id, job["id"])["next_fire_at"]
        _at(monkeypatch, (nxt + timedelta(seconds=5)).replace(tzinfo=UTC).isoformat())
        (firing,) = _fire(db, settings)
        due_times.append(firing.due_at)
    # Clocks go forward on Sunday 29 March 2026: 09:00 is 08:00 UTC before and 07:00 UTC after.
    assert [d.strftime("%d %H:%M") for d in due_times] == ["28 08:00", "29 07:00", "30 07:00", "31 07:00"]
    assert {d.astimezone(BERLIN).strftime("%H:%M") for d in due_times} == {"09:00"}
    assert len(_cron_rows(db)) == 4


def test_schedule_requests_that_cannot_work_get_a_readable_error(settings, db, monkeypatch):
    _at(monkeypatch, "2026-03-23T07:00:00+00:00")
    drop(settings, "webchat", "a.json", msg("webchat", "set it up", "w1"))
    ingest_inbox(settings, db)
    bad = [
        {"description": "x", "action": "y", "cron": "61 9 * * *"},
        {"description": "x", "action": "y", "cron": "0 9 * * *", "timezone": "Mars/Olympus"},
        {"description": "x", "action": "y", "at": "2020-01-01T09:00"},
        {"description": "x", "action": "y", "at": "2026-03-24T09:00", "target_channel": "cron"},
        {"description": "x", "action": "y"},
    ]
    llm = ScriptedClient(*[ToolCall(f"t{n}", "schedule_create", args) for n, args in enumerate(bad)], "ok")
    Brain(db, settings, llm).drain()
    errors = [r.messages[-1]["content"][0] for r in llm.requests[1:]]
    assert all(e["is_error"] for e in errors)
    texts = [e["content"] for e in errors]
    assert "cron" in texts[0] and "Mars/Olympus" in texts[1] and "in the past" in texts[2]
    assert "cannot deliver to channel 'cron'" in texts[3] and "exactly one of" in texts[4]
    assert db.run(schedule_store.active_schedules) == []


def test_admin_tools_are_not_offered_to_connector_channels(settings, db):
    drop(settings, "webchat", "a.json", msg("webchat", "inspect", "w1"))
    ingest_inbox(settings, db)
    llm = ScriptedClient(ToolCall("t1", "system_inspect", {}), "ok")
    Brain(db, settings, llm).drain()
    assert "system_inspect" not in {t.name for t in llm.requests[0].tools}
    result = llm.requests[1].messages[-1]["content"][0]
    assert result["is_error"] and "unknown tool 'system_inspect'" in result["content"]


@pytest.mark.parametrize(
    ("text", "cron", "at"),
    [
        ("remind me every Monday at 9 to send my timesheet", "0 9 * * 1", None),
        ("Remind me to send my timesheet every Monday at 9am", "0 9 * * 1", None),
        ("every weekday at 7:30 give me a morning briefing", "30 7 * * 1-5", None),
        (
            "remind me in 2 minutes to stretch",
            None,
            "2026-11-22T10:17:30+01:00",
        ),  # to the second, never early
        ("in an hour remind me to call Anna", None, "2026-11-22T11:15:30+01:00"),
        ("remind me tomorrow at 8am to call mum", None, "2026-11-23T08:00:00+01:00"),
        ("remind me at 9 to water the plants", None, "2026-11-22T21:00:00+01:00"),  # the next 9 o'clock
        ("I go to the gym every day at 7", None, None),  # a fact, not a request
        ("what time is it?", None, None),
    ],
)
def test_offline_english_reminders(text, cron, at):
    wish = english.parse(text, datetime(2026, 11, 22, 10, 15, 30, tzinfo=BERLIN))
    if cron is None and at is None:
        assert wish is None
        return
    assert wish is not None and wish.cron == cron
    assert (wish.at.isoformat(timespec="seconds") if wish.at else None) == at
    assert wish.task and "remind" not in wish.task.lower() and not wish.task.endswith(("to", "at"))


def test_a_daily_half_past_one_fires_once_on_the_night_the_clocks_go_back(settings, db, monkeypatch):
    now = _at(monkeypatch, "2026-10-24T12:00:00+00:00")
    request = schedules.ScheduleRequest(
        description="pills", action="Take the pills.", cron="30 1 * * *", timezone="Europe/London"
    )
    db.run(schedules.create, request, settings, now, "telegram")
    fired = []
    for when in ("2026-10-25T00:31:00+00:00", "2026-10-25T01:31:00+00:00", "2026-10-26T01:31:00+00:00"):
        _at(monkeypatch, when)  # 01:31 BST, 01:31 GMT an hour later, the next night
        fired.append([f.due_at.isoformat() for f in _fire(db, settings)])
    assert fired == [["2026-10-25T00:30:00+00:00"], [], ["2026-10-26T01:30:00+00:00"]]


def _answer_in_london(home, texts: list[str], sent: str) -> dict[str, str]:
    """The owner's messages, sent at `sent`, answered by `cortex run` at noon in London (a Saturday,
    the day before the clocks go forward); the environment used, for the commands after it."""
    folder = home / "inbox" / "webchat"
    folder.mkdir(parents=True)
    (folder / "batch.jsonl").write_text(
        "".join(
            json.dumps({"channel": "webchat", "sender": "maya", "text": t, "timestamp": sent}) + "\n"
            for t in texts
        )
    )
    london = {"CORTEX_TIMEZONE": "Europe/London"}
    cortex("--now", "2026-03-28T12:00:00Z", "run", home=home, env=london)
    return london


@pytest.mark.timeout(600)
def test_reminders_sent_before_a_clock_change_and_read_late(tmp_path):
    """One inbox batch the day before the spring change, sent at 11:00 and read at 12:00 (London):
    the jobs are for the times the user meant, statements set none, and a request that cannot be
    read says so."""
    home = tmp_path / "home"
    long_task = " ".join(f"item{n}" for n in range(60))
    texts = [
        "remind me in 10 minutes to stretch",
        "remind me tomorrow at 9 to water the plants",
        "remind me every monday and friday at 8 to go to the gym",
        "Every Monday I have yoga at 6pm",
        "remind me to buy milk",
        f"remind me tonight at 8 to pack {long_task}",
    ]
    london = _answer_in_london(home, texts, "2026-03-28T11:00:00+00:00")

    jobs = {j["description"][:20]: j for j in json.loads(cortex("schedules", "--json", home=home).stdout)}
    assert {k: (j["when"], j["next_fire"]) for k, j in jobs.items()} == {
        "stretch": ("once", "2026-03-28T11:10+00:00"),  # ten minutes after it was sent
        "water the plants": ("once", "2026-03-29T09:00+01:00"),  # 09:00 after the change
        "go to the gym": ("cron 0 8 * * 1,5", "2026-03-30T08:00+01:00"),
        "pack item0 item1 ite": ("once", "2026-03-28T20:00+00:00"),
    }
    packing = jobs["pack item0 item1 ite"]
    assert len(packing["description"]) <= 200 and packing["description"].endswith("…")
    assert packing["action"] == f"Remind the user: pack {long_task}."
    replies = {r["reply_to"]: r["text"] for r in json.loads(cortex("outbox", "--json", home=home).stdout)}
    gym = "go to the gym — next Mon 30 Mar at 08:00 Europe/London, repeating at 08:00, only on Monday and Fri"
    assert gym in replies[3]
    assert replies[4] == "Noted."
    assert replies[5].startswith("I haven't set a reminder: I couldn't tell when.")

    # The stretch reminder was due while the message waited: listed as overdue, the next run
    # delivers it, once.
    listed = json.loads(cortex("--now", "2026-03-28T12:00:00Z", "schedules", "--json", home=home).stdout)
    assert {j["description"][:20]: j["overdue"] for j in listed} == {
        "stretch": True,
        "water the plants": False,
        "go to the gym": False,
        "pack item0 item1 ite": False,
    }
    lines = cortex("--now", "2026-03-28T12:00:00Z", "schedules", home=home).stdout.splitlines()
    assert [line.split()[0] for line in lines if "overdue: fires at the next run" in line] == [
        jobs["stretch"]["id"]
    ]
    later = cortex("--now", "2026-03-28T12:01:00Z", "run", home=home, env=london).stdout
    assert "fired 1 schedule(s), 1 late" in later and "Reminder: stretch" in later


@pytest.mark.timeout(600)
def test_reminders_every_few_minutes_or_hours_and_tonight_at_12(tmp_path):
    """Offline, through the CLI: steps that divide the hour or the day repeat by the clock, "tonight at
    12" is the coming midnight, and a step cron cannot keep is refused with what can be said instead,
    setting nothing."""
    home = tmp_path / "home"
    texts = [
        "remind me every 30 minutes to stretch",
        "every 2 hours remind me to drink water",
        "remind me tonight at 12 to lock up",
        "remind me every other day to water the plants",
        "remind me every 45 minutes to check the oven",
    ]
    london = _answer_in_london(home, texts, "2026-03-28T12:00:00+00:00")

    jobs = json.loads(cortex("schedules", "--json", home=home).stdout)
    assert {j["description"]: (j["when"], j["next_fire"]) for j in jobs} == {
        "stretch": ("cron */30 * * * *", "2026-03-28T12:30+00:00"),
        "drink water": ("cron 0 */2 * * *", "2026-03-28T14:00+00:00"),
        "lock up": ("once", "2026-03-29T00:00+00:00"),  # midnight after Saturday, not Saturday noon
    }
    replies = {r["reply_to"]: r["text"] for r in json.loads(cortex("outbox", "--json", home=home).stdout)}
    assert "stretch — next Sat 28 Mar at 12:30 Europe/London, repeating every 30 minutes, to" in replies[1]
    assert "repeating every 2 hours, to webchat" in replies[2]
    assert replies[4].startswith("I haven't set a reminder: every other day can't be kept exactly")
    assert 'every day or for named days, as in "every Monday and Thursday at 9"' in replies[4]
    assert replies[5].startswith(
        "I haven't set a reminder: every 45 minutes does not divide the hour, so it can't be kept "
        "exactly; say every 30 minutes or every hour."
    )

    # Half an hour later the stretch reminder comes, and again half an hour after that.
    for when in ("2026-03-28T12:30:10Z", "2026-03-28T13:00:10Z"):
        fired = cortex("--now", when, "run", home=home, env=london).stdout
        assert "fired 1 schedule(s)" in fired and "Reminder: stretch" in fired


def _claim(db) -> int:
    return db.run(bus.claim_next).id


def test_a_message_stuck_in_processing_is_requeued_with_its_attempt_counted(settings, db, monkeypatch):
    _at(monkeypatch, "2026-03-23T07:00:00+00:00")
    drop(settings, "webchat", "a.json", msg("webchat", "hello", "w1"))
    ingest_inbox(settings, db)
    stuck = _claim(db)  # a processing run took it and then hung or died
    _at(monkeypatch, "2026-03-23T07:05:00+00:00")
    assert db.run(supervise, settings, False) == []  # not stuck for long enough yet

    _at(monkeypatch, "2026-03-23T07:20:00+00:00")
    assert db.run(supervise, settings, True) == []  # a processing run is active: leave it alone
    db.run(lease.acquire, "drain", settings.lease_timeout_s)
    assert db.run(supervise, settings, False) == []  # a live drainer holds the lease
    db.run(lease.release)

    (finding,) = db.run(supervise, settings, False)
    assert (finding.kind, finding.subject, finding.action) == ("stuck_message", f"bus #{stuck}", "requeued")
    state, attempts = db.query("SELECT state, attempts FROM bus WHERE id = ?", [stuck])[0]
    assert state == "pending" and attempts == 1
    section = status(settings)["supervision"]
    assert section["findings"]["stuck_message"] == 1 and section["recent"][0]["subject"] == f"bus #{stuck}"
    assert section["last_check_at"].startswith("2026-03-23T07:20")


def test_supervision_sensor_requeues_and_asks_for_a_run(settings, db, monkeypatch):
    _at(monkeypatch, "2026-03-23T07:00:00+00:00")
    drop(settings, "webchat", "a.json", msg("webchat", "hello", "w1"))
    ingest_inbox(settings, db)
    _claim(db)
    _at(monkeypatch, "2026-03-23T08:00:00+00:00")
    with DagsterInstance.ephemeral() as instance:
        result = evaluate(supervision, instance, str(settings.home))
        assert len(result.run_requests) == 1 and result.run_requests[0].tags["cortex/lane"] == "brain"
        quiet = evaluate(supervision, instance, str(settings.home))
    assert db.run(bus.counts)["pending"] == 1
    assert "all clear" in quiet.skip_message


def test_scheduler_sensor_fires_and_asks_for_a_run(settings, db, monkeypatch):
    now = _at(monkeypatch, "2026-03-23T07:00:00+00:00")
    request = schedules.ScheduleRequest(
        description="water", action="Water the plants.", at="2026-03-23T09:00"
    )
    db.run(schedules.create, request, settings, now, "telegram")
    with DagsterInstance.ephemeral() as instance:
        early = evaluate(scheduler, instance, str(settings.home))
        assert not early.run_requests
        _at(monkeypatch, "2026-03-23T09:00:30+00:00")  # the instance timezone is UTC
        result = evaluate(scheduler, instance, str(settings.home))
    assert len(result.run_requests) == 1 and json.loads(result.cursor)["fired"] == 1
    assert [r["state"] for r in _cron_rows(db)] == ["pending"]
    assert db.run(schedule_store.active_schedules) == []  # a one-shot job is done after it fired


def test_an_overdue_op_becomes_failed_and_is_shown_once(settings, db, monkeypatch):
    _at(monkeypatch, "2026-03-23T07:00:00+00:00")
    drop(settings, "webchat", "a.json", msg("webchat", "first", "w1"))
    ingest_inbox(settings, db)
    op_id = db.run(ops_store.spawn, 1, "compare flight prices", "webchat", settings.op_deadline_hours)
    Brain(db, settings, ScriptedClient("ok")).drain()

    _at(monkeypatch, "2026-03-24T08:00:00+00:00")  # the 24 h deadline has passed
    (finding,) = db.run(supervise, settings, False)
    assert (finding.kind, finding.subject, finding.action) == ("overdue_op", op_id, "failed")
    assert db.run(supervise, settings, False) == []  # found once

    for n in (2, 3):
        drop(settings, "webchat", f"{n}.json", msg("webchat", f"message {n}", f"w{n}"))
    ingest_inbox(settings, db)
    llm = ScriptedClient("The flight prices task failed.", "ok", "ok")
    Brain(db, settings, llm).drain()
    # First the notice supervision queued, answered on the task's channel; then the owner's messages.
    assert [r.hints["text"] for r in llm.requests][1:] == ["message 2", "message 3"]
    assert llm.requests[0].hints["schedule"]["overdue_op"] == op_id
    shown = [f"[FAILED] {op_id}" in r.system for r in llm.requests]
    assert shown == [True, False, False]
    assert [r["text"] for r in db.run(outbox.waiting)][1] == "The flight prices task failed."


def test_overdue_work_told_in_a_reply_before_its_notice_is_not_told_again(settings, db, monkeypatch):
    """The owner wrote before supervision ran: the drain's start failed the work and queued its
    notice behind the owner's message, whose reply told the failure. The notice then asked the model
    to "tell the user … unless already told", and a model told it again (review, helper-58)."""
    _at(monkeypatch, "2026-03-23T07:00:00+00:00")
    drop(settings, "webchat", "a.json", msg("webchat", "first", "w1"))
    ingest_inbox(settings, db)
    op_id = db.run(ops_store.spawn, 1, "compare flight prices", "webchat", settings.op_deadline_hours)
    Brain(db, settings, ScriptedClient("ok")).drain()
    _at(monkeypatch, "2026-03-24T08:00:00+00:00")
    drop(settings, "webchat", "b.json", msg("webchat", "any news?", "w2"))
    ingest_inbox(settings, db)
    llm = ScriptedClient(default="The flight prices task failed, sorry.")
    Brain(db, settings, llm).drain()
    assert [r.hints["text"] for r in llm.requests] == ["any news?"]  # the notice asked no model
    assert f"[FAILED] {op_id}" in llm.requests[0].system
    told = [r["text"] for r in db.run(outbox.waiting) if "failed" in r["text"]]
    assert told == ["The flight prices task failed, sorry."]
    assert db.run(bus.counts)["completed"] == 3


def test_supervision_sensor_has_overdue_work_told_at_once(settings, db, monkeypatch):
    """The owner hears of delegated work past its deadline when supervision finds it, not when they
    next write: the sensor queues the notice and asks for a processing run."""
    _at(monkeypatch, "2026-03-23T07:00:00+00:00")
    drop(settings, "telegram", "a.json", msg("telegram", "look into train times", "t1"))
    ingest_inbox(settings, db)
    db.run(ops_store.spawn, 1, "look into train times", "telegram", settings.op_deadline_hours)
    Brain(db, settings, ScriptedClient("ok")).drain()
    _at(monkeypatch, "2026-03-24T08:00:00+00:00")
    with DagsterInstance.ephemeral() as instance:
        result = evaluate(supervision, instance, str(settings.home))
        assert len(result.run_requests) == 1 and result.run_requests[0].tags["cortex/lane"] == "brain"
        assert "all clear" in evaluate(supervision, instance, str(settings.home)).skip_message
    Brain(db, settings, OfflineClient()).drain()
    (told,) = [r for r in db.run(outbox.waiting) if "failed" in r["text"]]
    assert (told["channel"], told["text"]) == (
        "telegram",
        "Your delegated task failed (look into train times): no result before its deadline.",
    )


def test_a_delegated_task_past_its_deadline_is_told_to_the_owner_at_once_and_only_once(tmp_path):
    """Offline, a task that failed at its deadline had never been told of (QA, helper-37); then it
    was told only in the owner's next reply, however much later they wrote (QA, helper-48). The run
    that finds it overdue tells the owner where they asked for it, once: not a stranger, not the
    owner's family group, not again in the owner's next reply."""
    home = tmp_path / "home"

    def replies(channel: str) -> list[str]:
        rows = json.loads(cortex("outbox", channel, "--json", home=home).stdout)
        return [r["text"] for r in sorted(rows, key=lambda r: r["reply_to"])]

    def said(channel: str, sender: str, text: str, when: str) -> str:
        cortex("--now", when, "send", channel, text, "--sender", sender, home=home)
        cortex("--now", when, "run", home=home)
        return replies(channel)[-1]

    cortex("init", "--owner", "webchat:ana", "--owner", "telegram:ana", home=home)
    asked = said(
        "webchat", "ana", "could you look up the opening hours of the Oceanarium?", "2026-03-23T09:00:00Z"
    )
    assert "handed that off as task" in asked
    cortex("--now", "2026-03-24T10:00:00Z", "run", home=home)  # supervision: past the 24 h deadline
    assert replies("webchat")[-1] == (
        "Your delegated task failed (could you look up the opening hours of the Oceanarium?): no result "
        "before its deadline."
    )
    said("telegram", "eve", "hello there", "2026-03-24T10:01:00Z")
    # The owner in a family group: the news is not told there (it had reached the group's thread).
    group = {"channel": "telegram", "sender": "ana", "text": "see you all at 8", "thread": "family-group"}
    (home / "inbox" / "telegram").mkdir(parents=True, exist_ok=True)
    (home / "inbox" / "telegram" / "group.json").write_text(json.dumps(group))
    cortex("--now", "2026-03-24T10:01:30Z", "run", home=home)
    assert not any("failed" in text for text in replies("telegram")), replies("telegram")
    assert "failed" not in said("webchat", "ana", "any news on the oceanarium?", "2026-03-24T10:02:00Z")
    assert sum("failed" in text for text in replies("webchat")) == 1, replies("webchat")


def test_a_hung_run_is_recorded_once(settings, db, monkeypatch):
    _at(monkeypatch, "2026-03-23T09:00:00+00:00")
    run = {"run_id": "a1b2c3d4e5", "job": "process_messages", "started": datetime(2026, 3, 23, 7, 30)}
    (finding,) = db.run(supervise, settings, True, [run])
    assert (finding.kind, finding.subject) == ("hung_run", "a1b2c3d4e5") and "07:30" in finding.detail
    assert db.run(supervise, settings, True, [run]) == []
    assert status(settings)["supervision"]["findings"]["hung_run"] == 1


def test_the_model_knows_the_users_time_to_schedule_by(tmp_path, monkeypatch):
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.instance import init_home
    from cortex_pipelines.storage import Database

    berlin = load_settings(tmp_path / "home", timezone="Europe/Berlin")
    init_home(berlin)
    db = Database(berlin.paths.db)
    _at(monkeypatch, "2026-03-30T07:00:00+00:00")
    drop(berlin, "webchat", "a.json", msg("webchat", "remind me at 9 to call the bank", "w1"))
    ingest_inbox(berlin, db)
    llm = ScriptedClient("ok")
    Brain(db, berlin, llm).drain()
    assert "Now: Monday 2026-03-30 09:00 (Europe/Berlin)." in llm.requests[0].system
    assert llm.requests[0].hints["now"].startswith("2026-03-30T09:00:00+02:00")
    # The message's own header tells the same time: in UTC (07:00) it read as two hours before "Now".
    said = llm.requests[0].messages[-1]["content"]
    assert said.startswith("[webchat · maya · 2026-03-30 09:00] remind me at 9"), said


def test_every_tool_name_is_one_the_messages_api_accepts():
    import re

    from cortex_pipelines.brain.tools import TOOLS

    names = [t.name for t in TOOLS]
    assert len(names) == len(set(names)) and all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in names)
    assert {"schedule_create", "schedule_list", "schedule_delete"} <= set(names)


def test_a_reminder_too_long_for_the_bus_limit_is_cut_and_the_others_still_fire(tmp_path):
    """A reminder made under a higher CORTEX_MAX_TEXT_BYTES than the one in force at its firing was
    refused by the bus: every due job stopped and every `cortex run` crashed (QA, helper-26)."""
    home = tmp_path / "home"
    long_task = " ".join(f"word{i:04d}" for i in range(220))
    cortex("send", "webchat", "remind me in 2 minutes to drink water", home=home)
    cortex("send", "webchat", f"remind me in 5 minutes to {long_task}", home=home)
    cortex("run", home=home)
    assert len(json.loads(cortex("schedules", "--json", home=home).stdout)) == 2

    fired = cortex("--now", "+7m", "run", home=home, env={"CORTEX_MAX_TEXT_BYTES": "2048"})
    assert "fired 2 schedule(s)" in fired.stdout
    replies = [r["text"] for r in json.loads(cortex("outbox", "webchat", "--json", home=home).stdout)]
    assert any(r.startswith("Reminder: drink water") for r in replies), replies
    (long_reminder,) = [r for r in replies if "word0000" in r and r.startswith("Reminder:")]
    assert "word0219" in long_reminder  # the firing's text was cut, the job's action was not
    assert json.loads(cortex("schedules", "--json", home=home).stdout) == []


@pytest.mark.parametrize(
    ("channel", "asked_in", "later_in", "recipient"),
    [
        ("telegram", {"metadata": {"chat_id": "-100500"}}, {"metadata": {"chat_id": "-100999"}}, "chat_id"),
        ("webchat", {"thread": "project-x"}, {"thread": "holiday"}, "thread"),
    ],
)
def test_a_reminder_is_delivered_to_the_chat_that_asked_for_it(
    tmp_path, channel, asked_in, later_in, recipient
):
    """It went to whichever chat or thread the owner wrote in last on that channel: another
    group's included (QA, helper-26)."""
    home = tmp_path / "home"
    cortex("init", home=home)
    inbox = home / "inbox" / channel
    inbox.mkdir(parents=True, exist_ok=True)
    said = {"channel": channel, "sender": "user"}
    (inbox / "a.json").write_text(
        json.dumps({**said, **asked_in, "text": "remind me in 10 minutes to send the photos"})
    )
    cortex("run", home=home)
    (inbox / "b.json").write_text(
        json.dumps({**said, **later_in, "text": "my work project is called Falcon"})
    )
    cortex("run", home=home)
    assert "fired 1 schedule(s)" in cortex("--now", "+11m", "run", home=home).stdout

    replies = json.loads(cortex("outbox", channel, "--json", home=home).stdout)
    (reminder,) = [r for r in replies if r["text"].startswith("Reminder: send the photos")]
    where = asked_in["metadata"]["chat_id"] if recipient == "chat_id" else asked_in["thread"]
    assert reminder["recipient"][recipient] == where


def test_published_files_show_a_firing_as_the_owners_schedule_not_a_strangers(tmp_path):
    """narrative.md, BOOTSTRAP.md and hot-snapshot.md said "cron · scheduler (not the owner)" of the
    owner's own reminder (QA, helper-26)."""
    home = tmp_path / "home"
    cortex("send", "webchat", "remind me in 2 minutes to stretch", home=home)
    cortex("run", home=home)
    cortex("--now", "+3m", "run", home=home)
    published = {p.name: p.read_text() for p in home.rglob("*.md") if "workspace" not in p.parts}
    assert {"narrative.md", "BOOTSTRAP.md"} <= set(published)
    assert any("Scheduled job" in text for text in published.values())  # the firing is in them
    for name, text in published.items():
        assert "not the owner" not in text, (name, text)


def _reminder_and_task_then(*endings):
    """A model that sets a reminder and delegates a task in its first round, then answers each
    attempt's second round with the next of `endings` (an error or a text)."""
    left = list(endings)

    def respond(body):
        if not body.get("tools"):  # extraction and the like, not the brain
            return reply_text("[]")
        if body["messages"][-1]["role"] == "user" and isinstance(body["messages"][-1]["content"], str):
            return message(
                [
                    {
                        "type": "tool_use",
                        "id": f"toolu_r{len(left)}",
                        "name": "schedule_create",
                        "input": {
                            "description": "dentist",
                            "action": "Call the dentist",
                            "at": "2030-12-01T09:00:00",
                        },
                    },
                    {
                        "type": "tool_use",
                        "id": f"toolu_s{len(left)}",
                        "name": "sessions_spawn",
                        "input": {"task": "find the dentist's number"},
                    },
                ],
                stop_reason="tool_use",
            )
        return left.pop(0)

    return respond


@pytest.mark.parametrize("answered", [True, False], ids=["answered-on-the-last-try", "failed"])
def test_a_reminder_set_before_a_model_error_is_not_set_again_by_each_retry(tmp_path, answered):
    """The reminder and the delegated task of an attempt whose next model call failed go with the
    attempt: each of the three attempts had added its own, so the owner got three reminders (and,
    when the message failed, reminders for a request they were told had failed)."""
    home = tmp_path / "home"
    env = {"CORTEX_LLM_RETRIES": "0", "CORTEX_MAX_ATTEMPTS": "3", "CORTEX_RETRY_BACKOFF_S": "0"}
    last = reply_text("Reminder set.") if answered else reply_error(500)
    cortex("send", "webchat", "remind me to call the dentist on Dec 1 at 9", home=home)
    with MessagesServer(
        responder=_reminder_and_task_then(reply_error(500), reply_error(500), last)
    ) as server:
        cortex("run", home=home, env={**server.cortex_env(), **env}, check=False)

    reminders = json.loads(cortex("schedules", "--json", home=home).stdout)
    ops = json.loads(cortex("status", "--json", home=home).stdout)["ops"]
    assert [r["description"] for r in reminders] == (["dentist"] if answered else [])
    assert ops["pending"] == (1 if answered else 0)
