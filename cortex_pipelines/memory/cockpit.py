"""What the memory assets show in Dagster's UI: memory sizes, the facts a run wrote, the current
memory, and the checks' findings, as plain values and markdown. Fact text, channel summaries and
categories are untrusted (anyone who reaches an inbox writes them): each passes through one_line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cortex_pipelines.config import Settings
from cortex_pipelines.memory.observations import Observation
from cortex_pipelines.memory.pipeline import EXTRACTION_CURSOR
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, VectorStore
from cortex_pipelines.publish.safe import one_line
from cortex_pipelines.storage import Database, cursors, facts
from cortex_pipelines.storage.facts import DELEGATED_RESULT, OP_HARVEST

PREVIEW_FACTS = 50  # of the facts one run wrote
CURRENT_FACTS = 200  # of the current memory, the most important
SHOWN_SOURCES = 10  # an observation can name dozens of turns


def memory_sizes(db: Database, vectors: VectorStore) -> dict:
    tiers = db.run(facts.tier_counts)
    return {"hot_facts": tiers["hot"], "cold_facts": tiers["cold"], "episodic_rows": vectors.count(EPISODIC)}


def _sources(ids: list[int]) -> str:
    shown = ", ".join(map(str, ids[:SHOWN_SOURCES]))
    return f"{shown} … (+{len(ids) - SHOWN_SOURCES})" if len(ids) > SHOWN_SOURCES else shown


def _whose(row: dict) -> str:
    """A delegated task's result is marked, as everywhere it is shown: not the owner's words."""
    return f"{DELEGATED_RESULT}: " if row.get("origin") == OP_HARVEST else ""


def fact_table(rows: Iterable[dict]) -> str:
    """Facts (id, categories, importance, tier, text, sources) as a markdown table."""
    lines = ["| id | categories | imp | tier | fact | sources |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {r['id']} | {one_line(', '.join(r['categories']), 80)} | {r['importance']:g} | {r['tier']} "
        f"| {_whose(r)}{one_line(r['text'], 120)} | {_sources(list(r['sources']))} |"
        for r in rows
    ]
    return "\n".join(lines)


def new_facts(db: Database, ids: list[int]) -> str:
    """The first facts a run wrote, as a table."""
    if not ids:
        return "_no new facts_"
    return fact_table(db.run(facts.with_categories, ids[:PREVIEW_FACTS]))


@dataclass
class CurrentMemory:
    table: str  # markdown: the most important current facts
    facts: int  # current facts in all
    turns_without_fact: int  # the owner's turns extraction read that no fact came from


def current_memory(db: Database, settings: Settings, limit: int = CURRENT_FACTS) -> CurrentMemory:
    """What the agent holds true now (active and not outdated by a later statement), most important
    first, and how many of the owner's turns read so far gave no fact: many may mean extraction
    misses what the owner says."""

    def read(con):
        shown, total = facts.current(con, limit)
        unused = facts.user_turns_without_fact(con, cursors.read(con, EXTRACTION_CURSOR))
        return shown, total, unused

    shown, total, unused = db.run(read)
    table = fact_table(shown) if shown else "_no current facts_"
    if total > len(shown):
        table += f"\n\n_{total - len(shown)} less important fact(s) left out_"
    owners = sum(n for channel, sender, n in unused if settings.is_owner(channel, sender))
    return CurrentMemory(table, total, owners)


def summaries_preview(summaries: dict[str, str]) -> str:
    lines = [f"- **{one_line(channel, 64)}**: {one_line(text, 500)}" for channel, text in summaries.items()]
    return "\n".join(lines) or "_nothing idle_"


def observations_preview(found: list[Observation]) -> str:
    lines = [
        f"- {one_line(o.text, 300)} _({one_line(o.evidence, 200)}; messages {list(o.sources)[:8]})_"
        for o in found
    ]
    return "\n".join(lines) or "_no repeated behaviour yet_"


def semantic_drift(db: Database, vectors: VectorStore) -> tuple[int, int]:
    """(active facts missing from LanceDB's semantic table, rows it has as active that DuckDB does
    not): both 0 when the mirror agrees with the truth."""
    truth = db.run(facts.active_ids)
    mirrored = vectors.ids(SEMANTIC, "status = 'active'")
    return len(truth - mirrored), len(mirrored - truth)
