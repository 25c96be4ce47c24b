"""Op harvesting (seed 000): results of delegated work become facts; harvested ops are marked
gardened and archived after a week. Failed ops stay for audit and are never harvested.

A result is another agent's text, untrusted: its fact (origin `OP_HARVEST`) starts cold, stays out
of the system floor and the bulletin, and every output that shows it marks it a delegated result,
not the owner's words (storage/facts.py). Its text is one line, so no part of it can start a line
that reads as a heading or a turn header."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from cortex_pipelines.config import Settings
from cortex_pipelines.memory.embedder import Embedder
from cortex_pipelines.memory.pipeline import remember
from cortex_pipelines.memory.vectors import VectorStore
from cortex_pipelines.storage import Database, gardening, ops, utcnow
from cortex_pipelines.storage.facts import OP_HARVEST, FactDraft


@dataclass
class HarvestReport:
    op_ids: list[str]  # the ops gardened by this run
    new: list[int]  # the facts written from them
    archived: int


def harvest_ops(db: Database, vectors: VectorStore, embedder: Embedder, settings: Settings) -> HarvestReport:
    """Turn completed ops into facts (with the write-time dedupe of extraction), mark them gardened
    and archive the ones gardened long enough ago."""
    op_ids, drafts = harvest_drafts(db, settings)
    new = remember(db, vectors, embedder, settings, drafts, rebuild_outdated=True).new if drafts else []
    return HarvestReport(op_ids, new, mark_gardened(db, op_ids, settings.op_archive_days))


def harvest_drafts(db: Database, settings: Settings) -> tuple[list[str], list[FactDraft]]:
    """Drafts for completed, acknowledged-or-not, not yet gardened ops, with their source turns.
    An op someone other than the owner asked for is gardened without a fact: its description is
    their words, not the user's."""
    rows = db.run(ops.harvestable)
    drafts, op_ids = [], []
    for row in rows:
        op_ids.append(row["id"])
        if not row["sources"]:
            continue  # provenance first: no source turn, no fact
        if row["asked_on"] is not None and not settings.is_owner(row["asked_on"], row["asked_by"]):
            continue
        task = " ".join(row["description"].split())[:120]
        result = " ".join((row["result"] or "").split())[:240]
        drafts.append(
            FactDraft(
                f"Delegated task “{task}” returned: {result}",
                "event",
                2,
                tuple(row["sources"]),
                (row["expected_channel"] or "router",),
                row["completed_at"],
                origin=OP_HARVEST,
            )
        )
    return op_ids, drafts


def mark_gardened(db: Database, op_ids: list[str], archive_after_days: float) -> int:
    """Stamp harvested ops; archive gardened ops older than the archive age. Returns archived."""
    now = utcnow()

    def apply(con):
        gardening.mark_gardened(con, op_ids, now)
        return gardening.archive_gardened(con, now, now - timedelta(days=archive_after_days))

    return db.run(apply)
