"""Op harvesting (seed 000): results of delegated work become facts; harvested ops are marked
gardened and archived after a week. Failed ops stay for audit and are never harvested."""

from __future__ import annotations

from datetime import timedelta

from cortex_pipelines.config import Settings
from cortex_pipelines.memory.store import FactDraft
from cortex_pipelines.storage import Database, ops, utcnow


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
                origin="op_harvest",
            )
        )
    return op_ids, drafts


def mark_gardened(db: Database, op_ids: list[str], archive_after_days: float) -> int:
    """Stamp harvested ops; archive gardened ops older than the archive age. Returns archived."""
    now = utcnow()

    def apply(con):
        if op_ids:
            con.execute(
                "UPDATE pending_ops SET gardened_at = ? WHERE id IN (SELECT unnest(?))", [now, op_ids]
            )
        return len(
            con.execute(
                "UPDATE pending_ops SET status = 'archived', archived_at = ? "
                "WHERE status = 'completed' AND gardened_at IS NOT NULL AND gardened_at < ? RETURNING id",
                [now, now - timedelta(days=archive_after_days)],
            ).fetchall()
        )

    return db.run(apply)
