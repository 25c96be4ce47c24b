"""`cortex recall`'s text output says what --json says: who said a hit when it was not the owner,
and that a statement the owner has since updated is no longer current (in the brain's words). And
it lists a statement once, however often it was said or merged."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.cli import cortex

PEANUTS = "I'm allergic to peanuts."
# Said on other days, one connector batch: the owner says it twice, once in other case, spacing and
# punctuation, and once in other words (one fact, cosine 0.93 to it); Tom and a sister are others.
ALLERGIES = [
    (9, "maya", "Peanuts are the one thing I'm allergic to."),
    (6, "maya", PEANUTS),
    (3, "maya", "i'm allergic to  peanuts!"),
    (2, "tom", PEANUTS),
    (2, "maya", "My sister is allergic to peanuts."),
    (1, "maya", PEANUTS),
]


def _said_the_same(text: str) -> bool:
    return re.sub(r"\W", "", text.lower()) == "imallergictopeanuts"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_recall_marks_a_strangers_words_and_an_updated_statement_and_lists_a_statement_once(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("--now", "-10d", "send", "webchat", "I live in Lisbon", home=home)
    cortex("--now", "-10d", "run", home=home)
    cortex("send", "webchat", "I moved to Porto last week", home=home)
    cortex("send", "webchat", "I live in Moscow", "--sender", "tom", home=home)
    now = datetime.now(UTC)
    batch = [
        {
            "channel": "webchat",
            "sender": who,
            "text": text,
            "timestamp": (now - timedelta(days=d)).isoformat(),
        }
        for d, who, text in ALLERGIES
    ]
    (home / "inbox" / "webchat" / "allergies.jsonl").write_text("".join(json.dumps(m) + "\n" for m in batch))
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

    # The paraphrase's fact merges into the newest: a fact of four turns, which was listed beside
    # each of the three that say its words ("I'm allergic to peanuts" four times).
    cortex("dedupe", "--merge", "--threshold", "0.9", home=home)
    hits = json.loads(cortex("recall", "what am I allergic to", "-k", "10", "--json", home=home).stdout)
    mine = [h for h in hits if _said_the_same(h["text"]) and h["sender"] != "tom"]
    assert len(mine) == 1 and mine[0].get("fact_id") and len(mine[0]["sources"]) == 4, hits
    assert [h["sender"] for h in hits if _said_the_same(h["text"]) and h["sender"] == "tom"] == ["tom"]
    shown = {h["text"] for h in hits}  # other words stay: the paraphrase's own turn, the sister
    assert {"Peanuts are the one thing I'm allergic to.", "My sister is allergic to peanuts."} <= shown, hits
