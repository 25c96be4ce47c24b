"""Supervision (seed 004): nothing stays stuck silently.

A message left in 'processing' with no live drainer is requeued (its attempt stays counted, so a
message that keeps killing the process still fails after `max_attempts`); delegated work past its
deadline is failed, shown to the model once as [FAILED], and told to the owner at once by a notice
on the `cron` channel whose reply goes where the work was asked for (the owner had heard of it only
when they next wrote); hung Dagster runs are failed by run monitoring and recorded here. Every
finding is a row the user sees in `cortex status --json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from cortex_pipelines import clock
from cortex_pipelines.config import SCHEDULE_CHANNEL, SCHEDULE_SENDER, Settings
from cortex_pipelines.ingest.envelope import validate
from cortex_pipelines.proactive import schedules
from cortex_pipelines.storage import bus, lease, outbox, utcnow
from cortex_pipelines.storage import ops as ops_store
from cortex_pipelines.storage import schedules as schedule_store
from cortex_pipelines.storage import supervision as findings_store


@dataclass(frozen=True)
class Finding:
    kind: str  # stuck_message | overdue_op | hung_run
    subject: str
    action: str
    detail: str


@dataclass(frozen=True)
class Recovery:
    requeued: list[int]
    failed: list[int]
    orphaned_ops: int
    dropped_schedules: list[str]


def recover_interrupted_work(con, settings: Settings, started_before=None) -> Recovery:
    """Undo what a dead drainer left half done: its messages go back to the queue (or fail), the
    work they delegated fails, the schedules they created go (the retry creates them again)."""
    requeued, failed = bus.recover_interrupted(con, settings.max_attempts, started_before)
    return Recovery(requeued, failed, *undo_unanswered(con, requeued + failed))


def undo_unanswered(con, bus_ids: list[int]) -> tuple[int, list[str]]:
    """What messages left unanswered (put back for a retry, or failed) did through their tools:
    the work they delegated fails and the schedules they created go. A retry creates them again,
    so kept they were run once per attempt; a failed message's owner is told it failed, not
    reminded of it later. Returns (ops failed, schedules deleted). Saving a fact or pinning an item
    again only reinforces it."""
    return ops_store.fail_orphans(con, bus_ids), schedule_store.delete_schedules_created_by(con, bus_ids)


def fail_overdue_work(con, settings: Settings) -> list[str]:
    """Delegated work past its deadline, failed, each with a notice queued that tells the owner
    where the work was asked for. Returns the ops' ids."""
    overdue = ops_store.fail_overdue(con)
    for op in overdue:
        _queue_overdue_notice(con, settings, op)
    return [op["id"] for op in overdue]


def _queue_overdue_notice(con, settings: Settings, op: dict) -> None:
    """A firing of Cortex's own, answered like a reminder: its reply says the task failed (the
    brain's failed_ops), on the channel the task was asked on (or where a reminder would go if
    that channel was turned off), in the conversation it was asked in. Its external id is the op's,
    so a notice is queued once however often supervision runs."""
    target, gone = schedules.reply_target(con, settings, op["expected_channel"])
    envelope = {
        "channel": SCHEDULE_CHANNEL,
        "external_id": f"overdue:{op['id']}",
        "sender": SCHEDULE_SENDER,
        "text": (
            f"Delegated task {op['id']} got {ops_store.OVERDUE} and has failed. Tell the user now, "
            "briefly, unless they have already been told."
        ),
        "priority": "normal",
        "metadata": {
            "overdue_op": op["id"],
            "description": op["description"],
            "target_channel": target,
            "asked_in": op["bus_id"],  # the reply goes to that conversation
        },
    }
    if gone and target != op["expected_channel"]:
        envelope["metadata"] |= {"rerouted": f"its channel {op['expected_channel']} is {gone}"}
    row = validate(envelope, settings, clock.now(), folder_channel=None, scheduler=True)
    bus.enqueue_rows(con, [row], source=f"supervision:{op['id']}")


def release_stopped_work(con, settings: Settings, claimed_since) -> list[int]:
    """Undo what a drainer stopped by SIGINT or SIGTERM left half done, as for a dead one, but its
    messages go back to the queue with the attempt not counted (unless it was stuck on one longer
    than CORTEX_STUCK_AFTER_S). Returns their ids. A drainer whose lease was taken over releases
    nothing: what it had claimed was recovered by the new holder, and what is in processing now is
    the new holder's."""
    if not lease.held(con):
        return []
    stuck_since = utcnow() - timedelta(seconds=settings.stuck_after_s)
    released = bus.release_claimed(con, claimed_since, stuck_since)
    undo_unanswered(con, released)
    return released


def supervise(
    con, settings: Settings, runs_active: bool, hung_runs: list[dict] | None = None
) -> list[Finding]:
    """One supervision pass in the caller's transaction; returns (and records) what it found."""
    now = utcnow()
    findings: list[Finding] = []
    if not runs_active and not lease.holder_alive(con, settings.lease_timeout_s):
        stuck_before = now - timedelta(seconds=settings.stuck_after_s)
        recovery = recover_interrupted_work(con, settings, started_before=stuck_before)
        waited = f"in processing for over {settings.stuck_after_s:.0f} s with no live processing run"
        findings += [
            Finding("stuck_message", f"bus #{i}", "requeued", f"{waited}; the attempt stays counted")
            for i in recovery.requeued
        ]
        findings += [
            Finding("stuck_message", f"bus #{i}", "failed", f"{waited}; it used up its attempts")
            for i in recovery.failed
        ]
    findings += [
        Finding("overdue_op", op_id, "failed", "no result before its deadline; shown as [FAILED] once")
        for op_id in fail_overdue_work(con, settings)
    ]
    seen = findings_store.recorded_hung_runs(con)
    findings += [
        Finding(
            "hung_run",
            run["run_id"],
            "left to run monitoring",
            f"{run['job']} has run since {run['started']:%Y-%m-%d %H:%M} UTC, past its max runtime",
        )
        for run in hung_runs or []
        if run["run_id"] not in seen
    ]
    for f in findings:
        findings_store.record_finding(con, now, f.kind, f.subject, f.action, f.detail)
    findings_store.mark_checked(con, now)
    return findings


def status(con, recent: int = 10) -> dict:
    """The `supervision` section of `cortex status --json`."""
    checked = findings_store.last_checked(con)
    totals = findings_store.finding_counts(con)
    rows = findings_store.latest_findings(con, recent)
    return {
        "last_check_at": checked.isoformat(timespec="seconds") + "Z" if checked else None,
        "findings": {kind: int(totals.get(kind, 0)) for kind in ("stuck_message", "overdue_op", "hung_run")},
        "recent": [{**r, "found_at": r["found_at"].isoformat(timespec="seconds") + "Z"} for r in rows],
    }


def system_overview(con) -> dict:
    """What the admin chat's `system_inspect` shows: queue, failures, delegated work, schedules."""
    return {
        "bus": bus.counts(con),
        "outbox": outbox.counts(con),
        "failed_messages": bus.latest_failures(con, 5),
        "pending_ops": ops_store.pending(con),
        "schedules": [schedules.describe(job) for job in schedule_store.active_schedules(con)],
        "supervision": status(con, recent=5),
    }
