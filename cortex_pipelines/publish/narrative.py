"""narrative.md (seed 003): the last 24 hours of activity as a structured, template-only story.

The window ends at the latest session activity rather than the wall clock, so the file depends on
the data alone and stays byte-identical while nothing new happens.

Only the owner's words are the user's: a turn from anyone else, and an op someone else asked for,
is listed with its channel and sender and marked "not the owner", never as the user's.
"""

from __future__ import annotations

from datetime import timedelta

from cortex_pipelines.config import Settings
from cortex_pipelines.publish.outputs import Published, publish
from cortex_pipelines.publish.safe import one_line
from cortex_pipelines.publish.threads import PRIORITY_ORDER
from cortex_pipelines.storage import Database
from cortex_pipelines.storage import ops as ops_store
from cortex_pipelines.storage.decisions import decisions_since
from cortex_pipelines.storage.published import latest_user_activity, timeline_turns
from cortex_pipelines.storage.threads import threads_to_publish

PRIORITY_MARK = {"critical": "🔴", "high": "🟠", "medium": "🟡", "low": "🔵"}
WINDOW = timedelta(hours=24)
TIMELINE_ENTRIES = 20


def _stranger(settings: Settings, channel: str | None, sender: str | None) -> str | None:
    """Who wrote it, when that is not the owner (an op whose asker is unknown counts as the owner's;
    a router result is another agent's; a firing of the owner's schedule is the owner's)."""
    if channel is None or settings.speaks_for_owner(channel, sender):
        return None
    return f"{one_line(channel, 32)} · {one_line(sender or 'unknown', 40)}"


def inputs(db: Database, settings: Settings) -> dict | None:
    """What narrative.md is made from, read in one transaction; None before anyone wrote."""
    return db.run(_read, settings)


def _read(con, settings: Settings) -> dict | None:
    anchor = latest_user_activity(con)
    if anchor is None:
        return None
    since = anchor - WINDOW
    ops = ops_store.recent(con, since)
    for op in ops:
        op["stranger"] = _stranger(settings, op["asked_on"], op["asked_by"])
    timeline = timeline_turns(con, since, TIMELINE_ENTRIES)
    for turn in timeline:
        turn["stranger"] = _stranger(settings, turn["channel"], turn["sender"])
    return {
        "anchor": anchor,
        "since": since,
        "threads": threads_to_publish(con),
        "decisions": decisions_since(con, since),
        "ops": ops,
        "timeline": timeline,
    }


def write_narrative(db: Database, settings: Settings) -> Published | None:
    """Rewrite narrative.md if the last 24 h of activity read differently; None before anyone wrote."""
    data = inputs(db, settings)
    if data is None:
        return None
    result = publish(db, settings, "narrative", lambda: render(data))
    result.details = {"decisions": len(data["decisions"]), "timeline": len(data["timeline"])}
    return result


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
        asked = f" (asked by {op['stranger']}, not the owner)" if op["stranger"] else ""
        out.append(f"- {one_line(op['description'], 100)} → {op['status']}{result}{asked}")
    if not data["ops"]:
        out.append("- none")
    out += ["", "## Timeline"]
    out += [
        f"- {t['ts']:%m-%d %H:%M} "
        f"{t['stranger'] + ' (not the owner)' if t['stranger'] else one_line(t['channel'], 32)}: "
        f"{one_line(t['content'], 100)} (msg {t['id']})"
        for t in data["timeline"]
    ] or ["- no activity"]
    return "\n".join(out) + "\n"
