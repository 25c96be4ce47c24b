"""The offline provider answers from the owner's pins too: a pin sits in the system floor, which
the context leaves out of its recalled memories, so before `cortex pin "Maya's passport expires
2027-03-01"` and then "When does my passport expire?" got "I don't have anything on that yet."
It quotes only a pin the question names, and never to someone who is not the owner."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import cortex


@pytest.mark.slow
def test_the_offline_reply_quotes_the_pin_a_question_names(tmp_path):
    home = tmp_path / "home"
    cortex("pin", "Maya's passport expires 2027-03-01", "--label", "passport", home=home)
    asked = [
        ("maya", "When does my passport expire?"),
        ("maya", "What's my favourite colour?"),
        ("tom", "When does my passport expire?"),  # not an owner
    ]
    folder = home / "inbox" / "webchat"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "batch.jsonl").write_text(
        "".join(json.dumps({"channel": "webchat", "sender": s, "text": t}) + "\n" for s, t in asked)
    )
    cortex("run", home=home)
    replies = {r["reply_to"]: r["text"] for r in json.loads(cortex("outbox", "--json", home=home).stdout)}

    assert "Maya's passport expires 2027-03-01 (pinned)" in replies[1], replies[1]
    assert replies[2] == "I don't have anything on that yet.", replies[2]
    assert "2027" not in replies[3], replies[3]
