"""Decisions said in conversation (seed 003): append-only, one row per decision id. A decision
drawn from a turn the user asked to forget is read nowhere while it stays forgotten."""

from __future__ import annotations

from datetime import datetime

from cortex_pipelines.storage.published import QUOTABLE_TURNS
from cortex_pipelines.storage.rows import dict_rows

COLUMNS = "id, what, why, impact, who, decided_at, source, channel"
_NOT_FORGOTTEN = f"source IN ({QUOTABLE_TURNS})"


def decisions_since(con, since: datetime | None) -> list[dict]:
    """Decisions made at or after `since` (all of them with None), oldest first. Also what a new
    decision is deduplicated against: one restated after a forget is stated anew."""
    return dict_rows(
        con.execute(
            f"SELECT {COLUMNS} FROM decisions WHERE (? IS NULL OR decided_at >= ?) AND {_NOT_FORGOTTEN} "
            "ORDER BY decided_at, id",
            [since, since],
        )
    )


def newest_decisions(con, since: datetime, limit: int) -> list[dict]:
    """At most `limit` decisions made at or after `since`, newest first."""
    return dict_rows(
        con.execute(
            f"SELECT {COLUMNS} FROM decisions WHERE decided_at >= ? AND {_NOT_FORGOTTEN} "
            "ORDER BY decided_at DESC, id LIMIT ?",
            [since, limit],
        )
    )


def add_decisions(con, decisions: list[dict]) -> None:
    """New decisions; one already stored (same id) is left as it is."""
    for d in decisions:
        con.execute(
            f"INSERT INTO decisions ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            [d["id"], d["what"], d["why"], d["impact"], d["who"], d["decided_at"], d["source"], d["channel"]],
        )
