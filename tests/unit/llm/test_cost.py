"""Cost estimates: tokens priced per model from config, offline tokens labelled as estimates."""

from __future__ import annotations

import pytest

from cortex_pipelines.config import load_settings
from cortex_pipelines.llm.cost import price


def _row(provider: str, model: str, **tokens: int) -> dict:
    counts = {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    return {"provider": provider, "model": model, "calls": 1, **counts, "output_tokens": 0, **tokens}


def test_each_kind_of_token_is_priced_at_its_rate(tmp_path):
    settings = load_settings(tmp_path)
    rows = [
        _row(
            "anthropic",
            "claude-sonnet-4-6",
            input_tokens=1_000_000,
            cache_creation_input_tokens=1_000_000,
            cache_read_input_tokens=2_000_000,
            output_tokens=100_000,
        )
    ]
    spend = price(rows, settings)
    assert spend.cost_usd == pytest.approx(3.0 + 3.75 + 2 * 0.30 + 0.1 * 15.0)
    assert spend.cached_share == pytest.approx(0.5)
    assert spend.label() == "estimate from config prices"


def test_prices_come_from_config_and_unknown_models_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "CORTEX_LLM_PRICES",
        '{"claude-opus-4-6": {"input": 5, "output": 25, "cache_write": 6.25, "cache_read": 0.5}}',
    )
    settings = load_settings(tmp_path)
    spend = price(
        [
            _row("anthropic", "claude-opus-4-6", input_tokens=1_000_000),
            _row("anthropic", "mystery-model", input_tokens=1_000_000),
        ],
        settings,
    )
    assert spend.cost_usd == pytest.approx(5.0)
    assert spend.unpriced == ["mystery-model"] and "no price for mystery-model" in spend.label()


def test_offline_tokens_are_estimates_priced_as_the_reply_model(tmp_path):
    settings = load_settings(tmp_path, model="claude-haiku-4-5")
    spend = price([_row("offline", "cortex-offline-1", input_tokens=1_000_000)], settings)
    assert spend.cost_usd == pytest.approx(1.0)
    assert "offline tokens counted at ~4 characters each, priced as claude-haiku-4-5" in spend.label()
