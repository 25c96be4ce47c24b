"""narrative.md (seed 003): the last 24 hours of activity as a structured, template-only story.

The window ends at the latest session activity rather than the wall clock, so the file depends on
the data alone and stays byte-identical while nothing new happens.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cortex_pipelines.publish.safe import one_line
from cortex_pipelines.publish.tracking import PRIORITY_ORDER
from cortex_pipelines.storage import Database

PRIORITY_MARK = {"critical": "🔴", "high": "🟠", "medium": "🟡", "low": "🔵"}
WINDOW = timedelta(hours=24)
TIMELINE_ENTRIES = 20


def latest_activity(db: Database) -> datetime | None:
    """When the user last said something (replies carry the wall-clock time they were made)."""
    return db.query("SELECT max(ts) FROM session WHERE role = 'user'")[0][0]


def inputs(db: Database, anchor: datetime) -> dict:
    since = anchor - WINDOW
    threads = db.query_dicts(
        "SELECT id, title, status, priority, summary, waiting_for, mood, last_activity, closed_at, sources "
        "FROM threads ORDER BY id"
    )
    decisions = db.query_dicts(
        "SELECT id, what, impact, who, decided_at, source FROM decisions WHERE decided_at >= ? "
        "ORDER BY decided_at, id",
        [since],
    )
    ops = db.query_dicts(
        "SELECT id, description, status, result, dispatched_at, completed_at FROM pending_ops "
        "WHERE dispatched_at >= ? OR completed_at >= ? ORDER BY dispatched_at, id",
        [since, since],
    )
    timeline = db.query_dicts(
        "SELECT id, channel, content, ts FROM session WHERE role = 'user' AND ts >= ? "
        "ORDER BY ts DESC, id DESC LIMIT ?",
        [since, TIMELINE_ENTRIES],
    )
    return {
        "anchor": anchor,
        "since": since,
        "threads": threads,
        "decisions": decisions,
        "ops": ops,
        "timeline": list(reversed(timeline)),
    }


def render(data: dict) -> str:
    anchor, since = data["anchor"], data["since"]
    closed = [
        t for t in data["threads"] if t["status"] == "closed" and t["closed_at"] and t["closed_at"] >= since
    ]
    open_ = sorted(
        (t for t in data["threads"] if t["status"] == "open"),
        key=lambda t: (PRIORITY_ORDER.get(t["priority"], 9), -t["last_activity"].timestamp()),
    )
    out = [
        f"# Narrative — {anchor:%Y-%m-%d}",
        "",
        f"_The 24 hours of activity up to {anchor:%Y-%m-%d %H:%M} UTC._",
        "",
    ]
    out.append("## Completed threads")
    out += [f"- ✅ {one_line(t['title'], 80)} (closed {t['closed_at']:%m-%d %H:%M})" for t in closed] or [
        "- none"
    ]
    out += ["", "## Open threads"]
    for t in open_:
        wait = f"; waiting for {one_line(t['waiting_for'], 60)}" if t["waiting_for"] else ""
        out.append(
            f"- {PRIORITY_MARK.get(t['priority'], '')} {one_line(t['title'], 80)} [{t['priority']}]{wait}"
        )
    if not open_:
        out.append("- none")
    out += ["", "## Decisions"]
    out += [
        f"- {one_line(d['what'], 160)} ({d['impact']}; {one_line(d['who'] or 'unknown', 40)}, "
        f"{d['decided_at']:%m-%d %H:%M}) (msg {d['source']})"
        for d in data["decisions"]
    ] or ["- none"]
    out += ["", "## Delegated work"]
    for op in data["ops"]:
        result = f": {one_line(op['result'], 160)}" if op["result"] else ""
        out.append(f"- {one_line(op['description'], 100)} → {op['status']}{result}")
    if not data["ops"]:
        out.append("- none")
    out += ["", "## Timeline"]
    out += [
        f"- {t['ts']:%m-%d %H:%M} {one_line(t['channel'], 32)}: {one_line(t['content'], 100)} (msg {t['id']})"
        for t in data["timeline"]
    ] or ["- no activity"]
    return "\n".join(out) + "\n"
