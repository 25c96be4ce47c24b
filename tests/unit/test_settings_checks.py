"""Values that used to pass the settings check and fail later fail up front, with one line naming
the key: an unknown CORTEX_TIMEZONE (QA scenario 15), a CORTEX_EMBEDDING_MODEL path that is not
there, and a `--now` that moves the clock past what dates can hold (QA scenario 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cortex_pipelines.config import check_sender_id, load_settings
from tests.support.cli import cortex


def _one_line_failure(proc, start: str) -> str:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), proc.stderr
    return lines[0]


def test_an_unknown_timezone_fails_at_once_and_leaves_the_message_waiting(tmp_path):
    home = tmp_path / "home"
    queued = Path(cortex("send", "webchat", "first", home=home).stdout.split("queued in ", 1)[1].strip())
    bad = {"CORTEX_TIMEZONE": "Mars/Olympus"}

    status = cortex("status", home=home, env=bad, check=False)
    runs = [cortex("run", home=home, env=bad, check=False) for _ in range(3)]

    line = _one_line_failure(status, "cortex: config: CORTEX_TIMEZONE: ")
    assert "unknown timezone 'Mars/Olympus'" in line
    for run in runs:
        _one_line_failure(run, "cortex: config: CORTEX_TIMEZONE: ")
    # Three refused runs are not three deaths of a processing run: the message still waits.
    assert queued.is_file()
    assert json.loads(cortex("status", "--json", home=home).stdout)["bus"]["failed"] == 0


@pytest.mark.parametrize("zone", ["America", "../etc/passwd", ""])
def test_a_timezone_that_is_not_a_zone_is_refused(monkeypatch, zone):
    monkeypatch.setenv("CORTEX_TIMEZONE", zone)
    with pytest.raises(ValueError, match=r"^CORTEX_TIMEZONE: .*unknown timezone"):
        load_settings()


def test_a_real_timezone_is_accepted(monkeypatch):
    monkeypatch.setenv("CORTEX_TIMEZONE", "Europe/Berlin")
    assert load_settings().timezone == "Europe/Berlin"


def test_an_embedding_model_path_that_is_not_there_is_refused(tmp_path):
    missing = tmp_path / "models" / "minilm"
    proc = cortex("status", home=tmp_path / "home", env={"CORTEX_EMBEDDING_MODEL": str(missing)}, check=False)
    line = _one_line_failure(proc, "cortex: config: CORTEX_EMBEDDING_MODEL: ")
    assert str(missing) in line


def test_an_embedding_model_folder_or_name_is_accepted_without_loading(tmp_path, monkeypatch):
    """A folder is named one way whatever way it is written (`~`, a trailing slash, relative): its
    name is what LanceDB's tables say made their vectors."""
    folder = tmp_path / "models" / "minilm"
    folder.mkdir(parents=True)
    (folder / "modules.json").write_text("[]")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path / "models")
    for written in (str(folder), f"{folder}/", "~/models/minilm", "./minilm", "minilm"):
        monkeypatch.setenv("CORTEX_EMBEDDING_MODEL", written)
        assert load_settings().embedding_model == str(folder)
    monkeypatch.setenv("CORTEX_EMBEDDING_MODEL", "all-MiniLM-L6-v2")
    assert load_settings().embedding_model == "all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    "model", ["folder-without-a-model", "all-mpnet-base", "sentence-transformers/gtr-t5-xxl"]
)
def test_an_embedding_model_that_cannot_load_offline_is_refused_in_one_line(tmp_path, model):
    """A folder with no model in it, or a name neither shipped, installed nor cached, passed the
    check, then every command that embeds ended in an 80-line traceback."""
    (tmp_path / "folder-without-a-model").mkdir()
    (tmp_path / "folder-without-a-model" / "readme.txt").write_text("hi")
    given = str(tmp_path / model) if model.startswith("folder") else model
    env = {"CORTEX_EMBEDDING_MODEL": given, "HF_HOME": str(tmp_path / "hf")}
    proc = cortex("status", home=tmp_path / "home", env=env, check=False)
    line = _one_line_failure(proc, "cortex: config: CORTEX_EMBEDDING_MODEL: ")
    assert given in line and (
        "not a sentence-transformers model folder" in line or "not a model on this" in line
    )


@pytest.mark.parametrize("now", ["+99999999d", "-99999999d", "+" + "9" * 400 + "s", "9999-12-31"])
def test_a_clock_moved_past_what_dates_hold_fails_in_one_line(tmp_path, now):
    proc = cortex("--now", now, "status", home=tmp_path / "home", check=False)
    assert "moves the clock more than 1000 years" in _one_line_failure(proc, "cortex: --now: ")


@pytest.mark.parametrize(
    "sender", ["ana", "12345", "+351 912 000 111", "Ana Lima", "zoë@example.com", "测试"]
)
def test_a_printable_sender_id_is_accepted(sender):
    assert check_sender_id(sender) == sender


@pytest.mark.parametrize(
    "sender",
    [
        "Marta ❤️",  # U+FE0F variation selector, last
        "👩🏽‍💻 dev",  # ZWJ sequence
        "👨‍👩‍👧",
        "علی‌رضا",  # U+200C ZWNJ inside a Persian name
        "Ana\u00a0Maria",  # NBSP, as WhatsApp exports write it
        "Jean\u202fPaul",
        "+49 170 1234567",
        "12345678",
        "ana@example.com",
        "🏴󠁧󠁢󠁳󠁣󠁴󠁿 fan",  # flag: tag characters after U+1F3F4
        "1\ufe0f\u20e3 fan",  # keycap
    ],
)
def test_a_real_display_name_with_emoji_joiners_or_nbsp_is_accepted(sender):
    assert check_sender_id(sender) == sender


@pytest.mark.parametrize(
    ("sender", "reason"),
    [
        ("", "is blank"),
        (" \t", "is blank"),
        ("ana ", "leading or trailing whitespace"),
        ("\u00a0ana", "leading or trailing whitespace"),
        ("ana\nfake", "U+000A"),
        ("ana\u200b", "U+200B ZERO WIDTH SPACE"),
        ("an\u00ada", "U+00AD SOFT HYPHEN"),
        ("ana\u2066", "U+2066"),
        ("ana\u2029x", "U+2029"),
        ("a\u034fna", "U+034F"),
        ("ana\U000e0041", "U+E0041"),
        ("ana\ud800", "U+D800"),
        ("ana\u200b", "contains U+200B ZERO WIDTH SPACE, an invisible or control character"),
        ("ana\u200d", "ends with U+200D ZERO WIDTH JOINER"),
        ("\u200cana", "starts with U+200C ZERO WIDTH NON-JOINER"),
        ("an\u200da", "contains U+200D ZERO WIDTH JOINER between two plain letters"),
        ("\u200eana", "U+200E LEFT-TO-RIGHT MARK"),
        ("ana\u202e", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        (" ana", "leading or trailing whitespace"),
        ("ana\u00a0", "leading or trailing whitespace"),
        ("ana\u00ad", "U+00AD SOFT HYPHEN"),
        ("ana\ufe0f", "U+FE0F"),  # after a letter it varies nothing, only hides
        ("\ufe0fana", "U+FE0F"),
        ("an\U000e0061a", "U+E0061"),  # a tag character outside a flag
        ("ana\u2060x", "U+2060"),
        ("ana\u180ex", "U+180E"),
    ],
)
def test_a_sender_id_that_hides_characters_is_refused_with_why(sender, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        check_sender_id(sender)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("CORTEX_SENDER_ALLOWLIST", '{"telegram": ["@maya_user"]}', "'@maya_user' is not a Telegram user id"),
        ("CORTEX_OWNERS", "telegram:@maya_user", "'@maya_user' is not a Telegram user id"),
        ("CORTEX_TELEGRAM_API_BASE", "not a url", "'not a url' is not an http(s) URL"),
    ],
)
def test_telegram_settings_that_could_never_work_are_refused_in_one_line(tmp_path, key, value, says):
    """A username in the allowlist matched no message (each was skipped, a log line said so) and a
    Bot API base that is no URL read as "Telegram unreachable", retried for ever (QA, helper-54)."""
    proc = cortex("status", home=tmp_path / "home", env={key: value}, check=False)
    assert says in _one_line_failure(proc, f"cortex: config: {key}: ")


def test_an_empty_telegram_token_means_no_telegram(tmp_path):
    """`CORTEX_TELEGRAM_TOKEN=` as a template leaves it had refused `cortex serve` ("is not set")."""
    assert load_settings(tmp_path / "home", telegram_token="  ").telegram_token is None
    assert cortex("init", home=tmp_path / "home", env={"CORTEX_TELEGRAM_TOKEN": ""}).returncode == 0
