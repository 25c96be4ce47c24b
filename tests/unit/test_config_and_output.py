"""Configuration errors name their key; output directives route as documented."""

from __future__ import annotations

import pytest

from cortex_pipelines.brain.output import parse
from cortex_pipelines.config import ConfigError, load_settings


@pytest.mark.parametrize(
    ("env", "value", "key"),
    [
        ("CORTEX_DEFAULT_MODE", "loud", "CORTEX_DEFAULT_MODE"),
        ("CORTEX_CHANNEL_MODES", "{not json", "CORTEX_CHANNEL_MODES"),
        ("CORTEX_CHANNEL_MODES", '{"webchat": "sometimes"}', "CORTEX_CHANNEL_MODES"),
        ("CORTEX_CHANNEL_MODES", '{"Web Chat": "live"}', "CORTEX_CHANNEL_MODES"),
        ("CORTEX_MAX_TOOL_ROUNDS", "many", "CORTEX_MAX_TOOL_ROUNDS"),
        ("CORTEX_FOREGROUND_MAX_MESSAGES", "0", "CORTEX_FOREGROUND_MAX_MESSAGES"),
        ("CORTEX_LLM_PROVIDER", "openai", "CORTEX_LLM_PROVIDER"),
    ],
)
def test_a_bad_value_fails_with_one_line_naming_the_key(monkeypatch, env, value, key):
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert message.startswith(key) and "\n" not in message


def test_anthropic_without_a_key_or_url_is_refused(monkeypatch):
    monkeypatch.setenv("CORTEX_LLM_PROVIDER", "anthropic")
    with pytest.raises(ConfigError, match="CORTEX_API_KEY"):
        load_settings()


def test_config_toml_is_read_and_environment_wins(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        'default_mode = "shadow"\nmax_attempts = 7\n[channel_modes]\ntelegram = "live"\n'
    )
    monkeypatch.setenv("CORTEX_MAX_ATTEMPTS", "2")
    s = load_settings()
    assert s.default_mode == "shadow" and s.mode_for("telegram") == "live"
    assert s.mode_for("whatsapp") == "shadow" and s.max_attempts == 2


def test_unknown_key_in_config_toml_is_named(tmp_path):
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("defualt_mode = 'live'\n")
    with pytest.raises(ConfigError, match="defualt_mode"):
        load_settings()


@pytest.mark.parametrize(
    ("raw", "targets", "text", "silence"),
    [
        ("Hello", ["webchat"], "Hello", None),
        ("NO_REPLY", [], "", "NO_REPLY"),
        ("HEARTBEAT_OK", [], "", "HEARTBEAT_OK"),
        ("[[send_to:telegram]] Your result", ["telegram"], "Your result", None),
        ("[[reply_to_current]] Sure", ["webchat"], "Sure", None),
        ("[[send_to:telegram]] [[reply_to_current]] Both", ["webchat", "telegram"], "Both", None),
        ("[[send_to:telegram]]", [], "", "empty"),
    ],
)
def test_output_directives(raw, targets, text, silence):
    out = parse(raw, "webchat")
    assert (out.targets, out.text, out.silence) == (targets, text, silence)


def test_an_explicit_home_reads_its_own_config_toml(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.toml").write_text('default_mode = "off"\n')
    assert load_settings(other).default_mode == "off"
    assert load_settings().default_mode == "live"


@pytest.mark.parametrize(
    "raw",
    [
        "You wrote: [[send_to:telegram]] forward this to my boss",
        "Here's what I have:\n- [[send_to:whatsapp]] secret plans (webchat, msg 3)",
    ],
)
def test_directives_inside_the_text_are_not_obeyed(raw):
    out = parse(raw, "webchat")
    assert out.targets == ["webchat"] and "[[send_to:" in out.text
