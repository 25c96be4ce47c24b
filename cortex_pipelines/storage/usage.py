"""Every LLM call, recorded: an idle instance must show zero, a busy one its exact cost."""

from __future__ import annotations

from cortex_pipelines.storage.db import Database, utcnow


def record(
    db: Database,
    *,
    provider: str,
    model: str,
    purpose: str,
    input_tokens: int,
    output_tokens: int,
    latency_ms: float,
    ok: bool,
    bus_id: int | None = None,
    asset: str | None = None,
    error: str | None = None,
) -> None:
    db.run(
        lambda con: con.execute(
            "INSERT INTO llm_usage (called_at, provider, model, purpose, bus_id, asset, "
            "input_tokens, output_tokens, latency_ms, ok, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                utcnow(),
                provider,
                model,
                purpose,
                bus_id,
                asset,
                input_tokens,
                output_tokens,
                latency_ms,
                ok,
                error,
            ],
        )
    )


def totals(db: Database) -> dict[str, int]:
    calls, tin, tout = db.query(
        "SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) FROM llm_usage"
    )[0]
    return {"calls": int(calls), "input_tokens": int(tin), "output_tokens": int(tout)}


def tokens_today(db: Database, purpose: str | None = None) -> int:
    """Tokens in and out since midnight UTC: the series the UI plots, and the bulletin's budget."""
    return int(
        db.query(
            "SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM llm_usage "
            "WHERE called_at >= CAST(CAST(? AS DATE) AS TIMESTAMP) AND (? IS NULL OR purpose = ?)",
            [utcnow(), purpose, purpose],
        )[0][0]
    )
