"""Forget that forgets (DESIGN.md, "Forget, erase, supersede"): `forget` is soft and reversible, and
recall then surfaces neither the fact nor the turns it came from; `unforget` restores both."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import cortex


def _json(proc) -> list[dict]:
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_forget_hides_the_fact_and_the_turn_it_came_from_and_unforget_brings_both_back(tmp_path):
    """`forget` is soft: recall then finds neither the fact nor the message it was drawn from (on
    another channel, where the foreground does not show it), and `unforget` restores both."""
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("send", "webchat", "Remember that my locker code is 4417.", home=home)
    cortex("send", "webchat", "I prefer window seats on long flights.", home=home)
    cortex("run", home=home)
    found = _json(cortex("recall", "locker code", "-k", "5", "--json", home=home))
    fact_id = next(h["fact_id"] for h in found if "4417" in h["text"] and h.get("fact_id"))

    cortex("forget", str(fact_id), home=home)
    assert not [
        h
        for h in _json(cortex("recall", "locker code", "-k", "10", "--json", home=home))
        if "4417" in h["text"]
    ]
    cortex("send", "telegram", "what is my locker code?", home=home)
    cortex("run", home=home)
    replies = _json(cortex("outbox", "telegram", "--json", home=home))
    assert replies and "4417" not in replies[-1]["text"], replies
    seats = _json(cortex("recall", "which seat do I like", "-k", "3", "--json", home=home))
    assert "window" in seats[0]["text"]  # unrelated memories are untouched

    cortex("unforget", str(fact_id), home=home)
    back = _json(cortex("recall", "locker code", "-k", "5", "--json", home=home))
    assert any(h.get("fact_id") == fact_id for h in back), back
    assert cortex("unforget", str(fact_id), home=home, check=False).returncode != 0  # already active
