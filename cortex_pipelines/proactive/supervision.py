"""Supervision (seed 004): nothing stays stuck silently.

A message left in 'processing' with no live drainer is requeued (its attempt stays counted, so a
message that keeps killing the process still fails after `max_attempts`); delegated work past its
deadline is failed and shown to the model once as [FAILED]; hung Dagster runs are failed by run
monitoring and recorded here. Every finding is a row the user sees in `cortex status --json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from cortex_pipelines.config import Settings
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
    interrupted = requeued + failed
    return Recovery(
        requeued,
        failed,
        ops_store.fail_orphans(con, interrupted),
        schedule_store.delete_schedules_created_by(con, interrupted),
    )


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
    ops_store.fail_orphans(con, released)
    schedule_store.delete_schedules_created_by(con, released)
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
        for op_id in ops_store.fail_overdue(con)
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
