"""Compaction (seed 000), per conversation (storage/conversations.py): an idle foreground
conversation gets a rolling summary of its own turns and moves to the background layer, so two
chats or two forum topics of one channel are never summarized together. A hot snapshot of the
compacted turns is written first, so nothing said in the last stretch is lost to a summary."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from cortex_pipelines.config import Settings
from cortex_pipelines.files import write_atomic
from cortex_pipelines.llm.base import LLMClient, LLMRequest
from cortex_pipelines.llm.recorded import complete_recorded
from cortex_pipelines.memory.fusion import keywords
from cortex_pipelines.publish.outputs import redact
from cortex_pipelines.publish.safe import one_line, redact_secrets
from cortex_pipelines.storage import Database, published, summaries, utcnow

SNAPSHOT_TURNS = 12
SUMMARY_MAX_CHARS = 500  # a model's summary is cut here when stored; the prompt shows it whole
SUMMARY_SYSTEM = """Summarize what this conversation is about and its current focus in one or two \
sentences. Use only what the turns say. Update the previous summary if one is given."""


@dataclass
class CompactionReport:
    compacted: list[str] = field(default_factory=list)
    summaries: dict[str, str] = field(default_factory=dict)
    snapshot: Path | None = None
    llm_calls: int = 0


def _speaker(settings: Settings, turn: dict) -> str:
    """Who said a turn: "user" only for the owner, so a stranger's words (or a router result) in the
    snapshot or a summary read as theirs."""
    if turn["role"] != "user":
        return "agent"
    if settings.said_by_owner(turn["channel"], turn["sender"]):
        return "user"
    if settings.speaks_for_owner(turn["channel"], turn["sender"]):  # the owner's schedule firing
        return one_line(turn["sender"], 40)
    return f"{one_line(turn['sender'] or 'unknown sender', 40)} (not the owner)"


def _offline_summary(turns: list[dict], previous: str | None, settings: Settings) -> str:
    words = Counter(w for t in turns if t["role"] == "user" for w in keywords(t["content"]))
    topics = ", ".join(w for w, _ in words.most_common(5)) or "small talk"
    last = next((t for t in reversed(turns) if t["role"] == "user"), turns[-1])
    who = _speaker(settings, last)
    said_by = f"the {who}" if who in ("user", "agent") else who
    line = " ".join(redact_secrets(last["content"]).split())[:120]
    return f"{len(turns)} recent message(s) about {topics}; last from {said_by}: “{line}”"


def _snapshot(by_conversation: dict[str, list[dict]], settings: Settings, written: datetime) -> str:
    """out/hot-snapshot.md is published (BOOTSTRAP.md embeds it): a section per conversation, headed
    by its key, and every turn one escaped, redacted line (chat and thread ids are untrusted too)."""
    lines = ["# Hot snapshot", "", f"Written {written:%Y-%m-%d %H:%M} UTC before compaction.", ""]
    for conversation, turns in by_conversation.items():
        lines.append(f"## {one_line(conversation, 80)}")
        for t in turns[-SNAPSHOT_TURNS:]:
            who = _speaker(settings, t)
            lines.append(f"- [{t['ts']:%Y-%m-%d %H:%M}] {who}: {one_line(t['content'], 300)} (msg {t['id']})")
        lines.append("")
    return redact("\n".join(lines), settings)


def republish_snapshot(db: Database, settings: Settings) -> None:
    """A forget must leave hot-snapshot.md at once, like the other published files, and an unforget
    bring its turns back: the snapshot is written again from the turns it showed that are not
    forgotten now, with its own time. The file keeps its time too, as BOOTSTRAP.md embeds a snapshot
    for an hour after that: a forget must not make an old one new."""
    path = settings.paths.hot_snapshot
    shown = db.run(published.snapshot_shown)
    if shown is None or not path.is_file():
        return
    written, turn_ids = shown
    by_conversation: dict[str, list[dict]] = {}
    for turn in db.run(summaries.snapshot_turns, turn_ids):
        by_conversation.setdefault(turn["conversation"], []).append(turn)
    content = _snapshot(by_conversation, settings, written)
    if content == path.read_text(encoding="utf-8"):
        return
    kept = path.stat()
    write_atomic(path, content)
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))


def compact_idle_conversations(db: Database, settings: Settings, llm: LLMClient | None) -> CompactionReport:
    report = CompactionReport()
    cutoff = utcnow() - timedelta(minutes=settings.compaction_idle_minutes)
    idle = db.run(summaries.idle_foreground_conversations, cutoff)
    if not idle:
        return report
    by_conversation: dict[str, list[dict]] = {}
    previous: dict[str, str | None] = {}
    for conversation in idle:
        previous[conversation], turns = db.run(summaries.unsummarized, conversation)
        if turns:
            by_conversation[conversation] = turns
    if by_conversation:
        report.snapshot, written = settings.paths.hot_snapshot, utcnow()
        shown = [t["id"] for turns in by_conversation.values() for t in turns[-SNAPSHOT_TURNS:]]
        # Recorded first: after a crash between the two, a forget writes this snapshot, not the
        # turns of the one before.
        db.run(published.record_snapshot, report.snapshot, shown, written)
        try:
            write_atomic(report.snapshot, _snapshot(by_conversation, settings, written))
        except OSError:
            report.snapshot = None  # graceful: the summary is still written to DuckDB
    for conversation in idle:
        turns = by_conversation.get(conversation)
        summary = previous[conversation]
        if turns:
            summary = _summarize(db, settings, llm, turns[-40:], previous[conversation], report)
        report.compacted.append(conversation)
        if summary:
            report.summaries[conversation] = summary
        db.run(summaries.demote, conversation, summary, [t["id"] for t in turns or []])
    return report


def _summarize(
    db: Database,
    settings: Settings,
    llm: LLMClient | None,
    turns: list[dict],
    previous: str | None,
    report: CompactionReport,
) -> str:
    if llm is None:
        return _offline_summary(turns, previous, settings)
    convo = "\n".join(f"{_speaker(settings, t)}: {t['content']}" for t in turns)
    prompt = f"Previous summary: {previous or '(none)'}\n\nTurns:\n{convo}"
    request = LLMRequest(
        SUMMARY_SYSTEM, [{"role": "user", "content": prompt}], purpose="summary", max_tokens=200
    )
    response = complete_recorded(db, llm, request, asset="channel_summaries")
    report.llm_calls += 1
    return " ".join(redact_secrets(response.text).split())[:SUMMARY_MAX_CHARS] or _offline_summary(
        turns, previous, settings
    )
