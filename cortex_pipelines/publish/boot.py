"""BOOTSTRAP.md (seed 003): what an agent reads first, within a fixed character budget.

Sections and their budgets: header and state 500, staleness warnings, hot snapshot 1000 (only if
under 1 h old), narrative 2000 (only if under 36 h old), top threads 8000, recent decisions 3000,
pinned working memory 1000, footer 500. Each section is cut to its budget and the whole to
max_chars, always with a visible marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from cortex_pipelines.config import Settings
from cortex_pipelines.publish.mood import detect_mood
from cortex_pipelines.publish.narrative import PRIORITY_MARK, PRIORITY_ORDER
from cortex_pipelines.publish.outputs import Published, publish
from cortex_pipelines.publish.safe import one_line
from cortex_pipelines.storage import Database, utcnow
from cortex_pipelines.storage.decisions import newest_decisions
from cortex_pipelines.storage.facts import tier_counts
from cortex_pipelines.storage.published import (
    BULLETIN,
    count_turns,
    latest_user_activity,
    published_row,
    recent_user_texts,
)
from cortex_pipelines.storage.session import pins
from cortex_pipelines.storage.threads import threads_to_publish

TRUNCATED = "\n[…truncated]"
BUDGETS = {
    "header": 500,
    "warnings": 500,
    "snapshot": 1000,
    "narrative": 2000,
    "threads": 8000,
    "decisions": 3000,
    "pins": 1000,
    "footer": 500,
}
FIELD_CHARS = 1000  # one summary, decision or pin: never more than the section it sits in
SNAPSHOT_FRESH = timedelta(hours=1)
NARRATIVE_FRESH = timedelta(hours=36)
MOOD_TURNS = 5  # the mood is read from the last few inbound turns
MODES = [
    (5, "Night — emergencies only"),
    (12, "Morning — brief, directive, efficient"),
    (18, "Afternoon — execution mode"),
    (23, "Evening — strategic, philosophical possible"),
]


@dataclass
class BootInputs:
    now: datetime  # naive UTC
    timezone: str
    last_activity: datetime | None
    mood: str
    warmup: str
    snapshot: str | None
    snapshot_at: datetime | None
    narrative: str | None
    narrative_at: datetime | None
    threads: list[dict]
    decisions: list[dict]
    pins: list[dict]
    counts: dict


def inputs(db: Database, settings: Settings) -> BootInputs:
    """What BOOTSTRAP.md is built from, as of now: the boot_context asset and an erasure rebuild it."""
    return db.run(_read, settings, utcnow())


def _read(con, settings: Settings, now: datetime) -> BootInputs:
    paths = settings.paths
    narrative_row = published_row(con, "narrative")
    bulletin_row = published_row(con, BULLETIN)
    return BootInputs(
        now=now,
        timezone=settings.timezone,
        last_activity=latest_user_activity(con),
        mood=detect_mood(" ".join(recent_user_texts(con, MOOD_TURNS))),
        warmup=bulletin_row["state"] if bulletin_row else "cold",
        snapshot=paths.hot_snapshot.read_text() if paths.hot_snapshot.is_file() else None,
        snapshot_at=_mtime(paths.hot_snapshot),
        narrative=paths.narrative.read_text() if paths.narrative.is_file() else None,
        narrative_at=narrative_row["generated_at"] if narrative_row else None,
        threads=threads_to_publish(con),
        decisions=newest_decisions(
            con, now - timedelta(days=settings.decision_recency_days), settings.boot_decisions
        ),
        pins=pins(con),
        counts={"hot facts": tier_counts(con)["hot"], "messages": count_turns(con)},
    )


def write_boot_context(db: Database, settings: Settings) -> Published:
    """Rewrite BOOTSTRAP.md if what it says changed."""
    data = inputs(db, settings)
    result = publish(
        db, settings, "boot_context", lambda: render(data, settings.boot_max_chars, settings.boot_threads)
    )
    result.details = {"budget": settings.boot_max_chars}
    return result


def _mtime(path: Path) -> datetime | None:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).replace(tzinfo=None) if path.is_file() else None


def mode_for(now_utc: datetime, timezone: str) -> str:
    local = now_utc.replace(tzinfo=ZoneInfo("UTC")).astimezone(ZoneInfo(timezone))
    for until, name in MODES:
        if local.hour < until:
            return name
    return MODES[0][1]


def fresh(at: datetime | None, now: datetime, limit: timedelta) -> bool:
    return at is not None and now - at < limit


def clip(text: str, budget: int) -> str:
    if len(text) <= budget:
        return text
    return text[: budget - len(TRUNCATED)].rstrip() + TRUNCATED


def _threads(threads: list[dict], limit: int) -> str:
    open_ = sorted(
        (t for t in threads if t["status"] == "open"),
        key=lambda t: (PRIORITY_ORDER.get(t["priority"], 9), -t["last_activity"].timestamp()),
    )
    shown = open_[:limit]
    lines = [f"## Active threads ({len(shown)} of {len(open_)})"]
    each = (BUDGETS["threads"] - 100) // max(1, len(shown))  # every top thread gets its share
    for t in shown:
        block = [f"### {PRIORITY_MARK.get(t['priority'], '')} {one_line(t['title'], 120)} [{t['priority']}]"]
        if t["summary"]:
            block.append(one_line(t["summary"], FIELD_CHARS))
        if t["waiting_for"]:
            block.append(f"Waiting for: {one_line(t['waiting_for'], 200)}")
        block.append(
            f"Last activity {t['last_activity']:%Y-%m-%d %H:%M}; mood {t['mood']}; "
            f"msg {', '.join(map(str, t['sources'][-3:]))}"
        )
        lines.append(clip("\n".join(block), each))
    if not open_:
        lines.append("- none")
    return "\n".join(lines)


def render(data: BootInputs, max_chars: int, max_threads: int) -> str:
    local_mode = mode_for(data.now, data.timezone)
    header = "\n".join(
        [
            "# BOOTSTRAP — Cortex boot context",
            "",
            f"Activity up to {data.last_activity:%Y-%m-%d %H:%M} UTC."
            if data.last_activity
            else "No activity yet.",
            f"Mode: {local_mode} ({data.timezone}). Mood: {data.mood}. Memory bulletin: {data.warmup}.",
        ]
    )
    warnings = []
    if data.last_activity and data.now - data.last_activity > timedelta(days=2):
        warnings.append(
            f"⚠ No activity for {(data.now - data.last_activity).days} days: "
            "threads and decisions may be out of date."
        )
    if data.warmup in ("cold", "degraded"):
        warnings.append(f"⚠ Memory bulletin is {data.warmup}.")
    if data.narrative and not fresh(data.narrative_at, data.now, NARRATIVE_FRESH):
        warnings.append("⚠ Narrative is older than 36 h and was left out.")
    sections = [clip(header, BUDGETS["header"])]
    if warnings:
        sections.append(clip("## Warnings\n" + "\n".join(warnings), BUDGETS["warnings"]))
    if data.snapshot and fresh(data.snapshot_at, data.now, SNAPSHOT_FRESH):
        sections.append(clip("## Hot snapshot\n" + _body(data.snapshot), BUDGETS["snapshot"]))
    if data.narrative and fresh(data.narrative_at, data.now, NARRATIVE_FRESH):
        sections.append(clip("## Narrative\n" + _body(data.narrative), BUDGETS["narrative"]))
    sections.append(clip(_threads(data.threads, max_threads), BUDGETS["threads"]))
    decisions = [f"## Recent decisions ({len(data.decisions)})"]
    decisions += [
        f"- {d['decided_at']:%Y-%m-%d} [{d['impact']}] {one_line(d['what'], FIELD_CHARS)} (msg {d['source']})"
        for d in data.decisions
    ] or ["- none in the last 14 days"]
    sections.append(clip("\n".join(decisions), BUDGETS["decisions"]))
    pins = ["## Pinned (working memory)"]
    pins += [
        f"- {('[' + one_line(p['label'], 40) + '] ') if p['label'] else ''}{one_line(p['text'], FIELD_CHARS)}"
        for p in data.pins
    ] or ["- nothing pinned"]
    sections.append(clip("\n".join(pins), BUDGETS["pins"]))
    footer = "---\n" + " · ".join(f"{k}: {v}" for k, v in data.counts.items())
    sections.append(clip(footer, BUDGETS["footer"]))
    return clip("\n\n".join(sections) + "\n", max_chars)


def _body(markdown: str) -> str:
    """Embed another file under a section of its own: without its top-level heading, and its other
    headings one level down (the narrative's "## Decisions" and "## Timeline" had stood beside
    BOOTSTRAP's own sections, two "Decisions" for an agent reading it section by section)."""
    lines = markdown.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(f"#{line}" if line.startswith("#") else line for line in lines).strip()
