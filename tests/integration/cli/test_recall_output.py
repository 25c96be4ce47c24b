"""`cortex recall`'s text output says what --json says: who said a hit when it was not the owner,
and that a statement the owner has since updated is no longer current (in the brain's words)."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.cli import cortex


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_recall_marks_a_strangers_words_and_an_updated_statement(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("--now", "-10d", "send", "webchat", "I live in Lisbon", home=home)
    cortex("--now", "-10d", "run", home=home)
    cortex("send", "webchat", "I moved to Porto last week", home=home)
    cortex("send", "webchat", "I live in Moscow", "--sender", "tom", home=home)
    cortex("run", home=home)

    hits = {h["text"]: h for h in json.loads(cortex("recall", "where do I live", "--json", home=home).stdout)}
    assert {"I live in Lisbon", "I moved to Porto last week", "I live in Moscow"} <= set(hits)
    lines = cortex("recall", "where do I live", home=home).stdout.splitlines()
    shown = {
        line.split("] ", 1)[1]: lines[n + 1] for n, line in enumerate(lines) if re.match(r"\d+\. \[", line)
    }

    assert " webchat · tom (not the owner) " in shown["I live in Moscow"]
    updated_by = hits["I live in Lisbon"]["updated_by"]
    assert shown["I live in Lisbon"].endswith(f"; no longer current: updated in msg {updated_by}")
    assert updated_by in hits["I moved to Porto last week"]["sources"]
    current = shown["I moved to Porto last week"]
    assert "not the owner" not in current and "no longer current" not in current
