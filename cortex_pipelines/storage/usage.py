"""Every LLM call, recorded: an idle instance must show zero, a busy one its exact cost."""

from __future__ import annotations

from cortex_pipelines.storage.db import utcnow


def record(
    con,
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
    con.execute(
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


def totals(con) -> dict[str, int]:
    calls, tin, tout = con.execute(
        "SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) FROM llm_usage"
    ).fetchone()
    return {"calls": int(calls), "input_tokens": int(tin), "output_tokens": int(tout)}


def tokens_today(con, purpose: str | None = None) -> int:
    """Tokens in and out since midnight UTC: the series the UI plots, and the bulletin's budget."""
    return int(
        con.execute(
            "SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM llm_usage "
            "WHERE called_at >= CAST(CAST(? AS DATE) AS TIMESTAMP) AND (? IS NULL OR purpose = ?)",
            [utcnow(), purpose, purpose],
        ).fetchone()[0]
    )
