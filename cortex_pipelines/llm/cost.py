"""What the LLM costs, in the open: tokens from llm_usage priced with the configured prices
(estimates, never billing), the share of input read from the prompt cache, and the daily token
budget every LLM purpose (and so every LLM-backed asset) spends from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from cortex_pipelines.config import Settings
from cortex_pipelines.llm.base import LLMClient
from cortex_pipelines.storage import Database, usage, utcnow

WINDOW_DAYS = 7  # a cost per day is averaged over the last week (or since the first call)


@dataclass
class Spend:
    calls: int = 0
    input_tokens: int = 0  # neither written to nor read from the cache
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0  # priced models only (see unpriced)
    unpriced: list[str] = field(default_factory=list)  # models with no price in config
    # The offline model's tokens are counted at about four characters each and priced as the
    # configured reply model (named here): what the same traffic would cost on it.
    offline_priced_as: str = ""

    @property
    def all_input_tokens(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def cached_share(self) -> float:
        """The share of input tokens read from the prompt cache."""
        total = self.all_input_tokens
        return self.cache_read_input_tokens / total if total else 0.0

    def label(self) -> str:
        """How far to trust the cost: always an estimate; say why when it is more of one."""
        notes = ["estimate from config prices"]
        if self.offline_priced_as:
            notes.append(f"offline tokens counted at ~4 characters each, priced as {self.offline_priced_as}")
        if self.unpriced:
            notes.append(f"no price for {', '.join(self.unpriced)} (CORTEX_LLM_PRICES)")
        return "; ".join(notes)


def price(rows: list[dict], settings: Settings) -> Spend:
    """Sum usage.by_model rows and price each model (the offline one as the reply model)."""
    spend = Spend()
    for row in rows:
        offline = row["provider"] == "offline"
        rates = settings.price_for(settings.model if offline else row["model"])
        if offline:
            spend.offline_priced_as = settings.model
        spend.calls += row["calls"]
        spend.input_tokens += row["input_tokens"]
        spend.cache_creation_input_tokens += row["cache_creation_input_tokens"]
        spend.cache_read_input_tokens += row["cache_read_input_tokens"]
        spend.output_tokens += row["output_tokens"]
        if rates is None:
            spend.unpriced.append(row["model"])
            continue
        spend.cost_usd += (
            row["input_tokens"] * rates.input
            + row["cache_creation_input_tokens"] * rates.cache_write
            + row["cache_read_input_tokens"] * rates.cache_read
            + row["output_tokens"] * rates.output
        ) / 1_000_000
    return spend


def spend_per_day(db: Database, settings: Settings) -> tuple[Spend, float]:
    """The last week's spend (or since the first call, at least a day) and the days it covers."""
    now = utcnow()
    first = db.run(usage.first_call_at)
    since = max(first or now, now - timedelta(days=WINDOW_DAYS))
    days = max(1.0, (now - since).total_seconds() / 86400)
    return price(db.run(usage.by_model, since=since), settings), days


def _figures(spend: Spend, suffix: str = "") -> dict:
    return {
        f"llm_input_tokens{suffix}": spend.all_input_tokens,
        f"llm_cached_input_tokens{suffix}": spend.cache_read_input_tokens,
        f"llm_cached_share{suffix}": round(spend.cached_share, 4),
        f"llm_output_tokens{suffix}": spend.output_tokens,
        f"llm_cost_usd_estimate{suffix}": round(spend.cost_usd, 6),
    }


def run_metadata(db: Database, settings: Settings, purpose: str, after_id: int | None = None) -> dict:
    """An LLM-backed asset's materialization metadata: this run's tokens, cached share and estimated
    cost (its calls are the ones after call `after_id`; None for the brain, whose lingering run
    materializes once per batch), and the same since midnight UTC beside the daily token budget."""
    midnight = utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
    today = price(db.run(usage.by_model, since=midnight, purpose=purpose), settings)
    run = {}
    if after_id is not None:
        run = _figures(price(db.run(usage.by_model, after_id=after_id, purpose=purpose), settings))
    return {
        **run,
        **_figures(today, "_today"),
        "llm_daily_token_budget": settings.daily_token_budget(purpose),
        "llm_cost_basis": today.label(),
    }


@dataclass
class Meter:
    """One run of an LLM-backed asset: it marks where the run's calls start, hands out the client
    only while the purpose's daily budget lasts, and prices the run's calls for its metadata."""

    db: Database
    settings: Settings
    purpose: str
    after_id: int

    @classmethod
    def start(cls, db: Database, settings: Settings, purpose: str) -> Meter:
        return cls(db, settings, purpose, db.run(usage.last_id))

    def budgeted(self, llm: LLMClient | None, warn: Callable[[str], None]) -> LLMClient | None:
        return budgeted(self.db, self.settings, self.purpose, llm, warn)

    def metadata(self) -> dict:
        return run_metadata(self.db, self.settings, self.purpose, self.after_id)


def within_budget(db: Database, settings: Settings, purpose: str, expected: int = 0) -> bool:
    """Whether today's tokens for `purpose`, and `expected` more, fit its daily budget."""
    return db.run(usage.tokens_today, purpose) + expected <= settings.daily_token_budget(purpose)


def budgeted(
    db: Database, settings: Settings, purpose: str, llm: LLMClient | None, warn: Callable[[str], None]
) -> LLMClient | None:
    """`llm` while `purpose` is within its daily token budget, else None (the deterministic path)."""
    if llm is None or llm.provider == "offline" or within_budget(db, settings, purpose):
        return llm
    warn(
        f"daily {purpose} token budget ({settings.daily_token_budget(purpose)}) spent: "
        "the deterministic path runs until midnight UTC"
    )
    return None


def status(db: Database, settings: Settings) -> dict:
    """For `cortex status`: the share of all input read from the prompt cache, and the estimated
    cost per day over the last week."""
    totals = price(db.run(usage.by_model), settings)
    week, days = spend_per_day(db, settings)
    return {
        "cached_share": round(totals.cached_share, 4),
        "cost_per_day_usd": round(week.cost_usd / days, 6),
        "cost_days": round(days, 2),
        "cost_basis": week.label(),
    }
