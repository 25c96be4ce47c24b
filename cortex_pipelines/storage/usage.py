"""Every LLM call, recorded: an idle instance must show zero, a busy one its exact cost."""

from __future__ import annotations

from datetime import datetime

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
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
) -> None:
    con.execute(
        "INSERT INTO llm_usage (called_at, provider, model, purpose, bus_id, asset, "
        "input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens, "
        "latency_ms, ok, error) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            utcnow(),
            provider,
            model,
            purpose,
            bus_id,
            asset,
            input_tokens,
            output_tokens,
            cache_creation_input_tokens,
            cache_read_input_tokens,
            latency_ms,
            ok,
            error,
        ],
    )


def totals(con) -> dict[str, int]:
    calls, tin, tout, written, read = con.execute(
        "SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), "
        "coalesce(sum(cache_creation_input_tokens), 0), coalesce(sum(cache_read_input_tokens), 0) "
        "FROM llm_usage"
    ).fetchone()
    return {
        "calls": int(calls),
        "input_tokens": int(tin),
        "output_tokens": int(tout),
        "cache_creation_input_tokens": int(written),
        "cache_read_input_tokens": int(read),
    }


def tokens_today(con, purpose: str | None = None) -> int:
    """Tokens in (cached ones included) and out since midnight UTC: the series the UI plots, and
    the daily token budgets of the LLM-backed assets."""
    return int(
        con.execute(
            "SELECT coalesce(sum(input_tokens + cache_creation_input_tokens + cache_read_input_tokens "
            "+ output_tokens), 0) FROM llm_usage "
            "WHERE called_at >= CAST(CAST(? AS DATE) AS TIMESTAMP) AND (? IS NULL OR purpose = ?)",
            [utcnow(), purpose, purpose],
        ).fetchone()[0]
    )


def by_model(
    con, *, since: datetime | None = None, after_id: int = 0, purpose: str | None = None
) -> list[dict]:
    """Tokens per provider and model of the calls made since `since` and after call `after_id`
    (one purpose, or all): what a cost estimate prices, model by model."""
    rows = con.execute(
        "SELECT provider, model, count(*), coalesce(sum(input_tokens), 0), "
        "coalesce(sum(cache_creation_input_tokens), 0), coalesce(sum(cache_read_input_tokens), 0), "
        "coalesce(sum(output_tokens), 0) FROM llm_usage "
        "WHERE (CAST(? AS TIMESTAMP) IS NULL OR called_at >= ?) AND id > ? AND (? IS NULL OR purpose = ?) "
        "GROUP BY provider, model ORDER BY provider, model",
        [since, since, after_id, purpose, purpose],
    ).fetchall()
    keys = ("provider", "model", "calls", "input_tokens", "cache_creation_input_tokens")
    keys += ("cache_read_input_tokens", "output_tokens")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def last_id(con) -> int:
    """The newest call's id: a run's own calls are the ones after it."""
    return int(con.execute("SELECT coalesce(max(id), 0) FROM llm_usage").fetchone()[0])


def first_call_at(con) -> datetime | None:
    """When the first recorded call was made: the days a per-day cost is averaged over."""
    return con.execute("SELECT min(called_at) FROM llm_usage").fetchone()[0]
