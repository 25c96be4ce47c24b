"""What supervision found (`supervision_findings`) and when it last looked (a row in `cursors`)."""

from __future__ import annotations

from datetime import datetime

from cortex_pipelines.storage.rows import dict_rows

CHECKED_CURSOR = "supervision_checked_at"


def recorded_hung_runs(con) -> set[str]:
    """Runs already recorded as hung: each is recorded once."""
    return {
        r[0]
        for r in con.execute("SELECT subject FROM supervision_findings WHERE kind = 'hung_run'").fetchall()
    }


def record_finding(con, found_at: datetime, kind: str, subject: str, action: str, detail: str) -> None:
    con.execute(
        "INSERT INTO supervision_findings (found_at, kind, subject, action, detail) VALUES (?, ?, ?, ?, ?)",
        [found_at, kind, subject, action, detail],
    )


def mark_checked(con, at: datetime) -> None:
    con.execute(
        "INSERT OR REPLACE INTO cursors (name, value, updated_at) VALUES (?, ?, ?)",
        [CHECKED_CURSOR, int(at.timestamp()), at],
    )


def last_checked(con) -> datetime | None:
    row = con.execute("SELECT updated_at FROM cursors WHERE name = ?", [CHECKED_CURSOR]).fetchone()
    return row[0] if row else None


def finding_counts(con) -> dict[str, int]:
    """Findings ever recorded, by kind."""
    return dict(con.execute("SELECT kind, count(*) FROM supervision_findings GROUP BY kind").fetchall())


def latest_findings(con, limit: int) -> list[dict]:
    return dict_rows(
        con.execute(
            "SELECT found_at, kind, subject, action, detail FROM supervision_findings "
            "ORDER BY id DESC LIMIT ?",
            [limit],
        )
    )
