"""Asking without a question mark is asking: "remind me what my locker code is" and "what's my
favourite food" get an answer from memory, and never become a fact, a recalled memory or an item of
`cortex recent`. A fact told inside a question ("We just moved to 22 Harbour Road in Bristol, can you
update my address?") is still told. Before, the offline reply to such a request was "Noted.", and
"What's my favourite food" came back as a fact."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import cortex

TOLD = [
    "My favourite food is Thai green curry.",
    "My locker at the gym is number 218, code 4471.",
    "I live in Edinburgh.",
    "The plumber is booked for Tuesday at 10.",
]
ASKED = [  # each without "?", and what its answer must carry
    ("what's my favourite food", "Thai green curry"),
    ("tell me where I live", "Edinburgh"),
    ("remind me what my locker code is", "4471"),
    ("need my locker code pls", "4471"),
    ("what time's the plumber coming", "Tuesday at 10"),
]
NOT_ASKING = [  # statements and requests that open like questions, and their replies
    ("What a day.", "Noted."),
    ("Does the trick.", "Noted."),
    ("Tell me when you're done.", "Noted."),
    ("Remind me to call mum at 5", "Okay, I'll remind you"),
]


def _run_batch(home, texts: list[str], sender: str = "maya") -> list[str]:
    """The texts as one connector file, one `cortex run`; the reply to each, in order."""
    folder = home / "inbox" / "webchat"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "batch.jsonl").write_text(
        "".join(json.dumps({"channel": "webchat", "sender": sender, "text": t}) + "\n" for t in texts)
    )
    cortex("run", home=home)
    replies = {r["reply_to"]: r["text"] for r in json.loads(cortex("outbox", "--json", home=home).stdout)}
    return [replies[n] for n in range(1, len(texts) + 1)]  # bus ids follow the file's order


def _json(*args: str, home) -> list[dict]:
    return json.loads(cortex(*args, "--json", home=home).stdout)


@pytest.mark.slow
def test_a_question_without_a_mark_is_answered_and_never_remembered_as_said(tmp_path):
    home = tmp_path / "home"
    asked = [q for q, _ in ASKED]
    replies = _run_batch(home, TOLD + asked + [t for t, _ in NOT_ASKING])

    for (question, answer), reply in zip(ASKED, replies[len(TOLD) : len(TOLD) + len(ASKED)], strict=True):
        assert answer in reply, (question, reply)
        for other in asked:
            assert other.lower() not in reply.lower(), (question, reply)
    for (said, expected), reply in zip(NOT_ASKING, replies[len(TOLD) + len(ASKED) :], strict=True):
        assert reply.startswith(expected), (said, reply)

    recent = [item["text"].lower() for item in _json("recent", "-k", "50", home=home)]
    assert not set(recent) & {q.lower() for q in asked}, recent
    for query in ("what is my favourite food", "where do I live", "locker code"):
        found = [hit["text"].lower() for hit in _json("recall", query, "-k", "10", home=home)]
        assert found and not set(found) & {q.lower() for q in asked}, (query, found)


@pytest.mark.slow
def test_a_fact_told_inside_a_question_is_kept(tmp_path):
    home = tmp_path / "home"
    replies = _run_batch(
        home,
        [
            "We just moved to 22 Harbour Road in Bristol, can you update my address?",
            "Since I'm allergic to penicillin, which antibiotics are usually safe?",
            "What's my address?",
            "What am I allergic to?",
        ],
    )
    assert "22 Harbour Road" in replies[2], replies[2]
    assert "penicillin" in replies[3], replies[3]
    recent = " ".join(item["text"] for item in _json("recent", home=home))
    assert "22 Harbour Road" in recent and "allergic to penicillin" in recent, recent
