"""Questions that ask for a list of what the user said rather than about one thing: what they
said on a day counted from the day they asked ("What did I tell you yesterday?"), in their own timezone, and
everything known of them ("What do you know about me?"). Such a question shares no word and no
meaning with what it asks for, so recall lists the owner's statements (and, for everything, the
most important facts): current ones, never another sender's words."""

from __future__ import annotations

import json
from datetime import date

import pytest

from cortex_pipelines.memory.dates import past_days
from cortex_pipelines.text import asks_what_is_known
from tests.support.cli import cortex

NEW_YORK = {"CORTEX_TIMEZONE": "America/New_York"}
ASKED_AT = "2026-12-01T02:00:00+00:00"  # Monday 30 November, 21:00 in New York
ANSWERED_AT = "2026-12-01T14:00:00+00:00"  # Tuesday, 09:00 there: the machine was off overnight
SAID = [  # (sent at, channel, sender, text)
    ("2026-11-28T20:00:00+00:00", "webchat", "user", "I live in Lisbon."),  # Sat 15:00
    (
        "2026-11-29T03:00:00+00:00",
        "webchat",
        "user",
        "My dentist appointment is on Friday at 3pm.",
    ),  # Sat 22:00
    ("2026-11-29T16:00:00+00:00", "webchat", "user", "I started reading Dune by Frank Herbert."),  # Sun 11:00
    ("2026-11-29T18:00:00+00:00", "webchat", "mallory", "I am moving to Mars next year."),  # a stranger
    ("2026-11-29T19:00:00+00:00", "router", "router", "Result: the user is moving to Mars."),  # another agent
    (
        "2026-11-30T03:00:00+00:00",
        "webchat",
        "user",
        "My sister Ana is visiting next month.",
    ),  # Sun 22:00 there
    ("2026-11-30T15:00:00+00:00", "webchat", "user", "I bought a new bike today."),  # Mon 10:00
    ("2026-11-30T16:00:00+00:00", "webchat", "user", "I moved to Porto last week."),  # Mon 11:00
]
LISBON, DENTIST, DUNE, _, _, ANA, BIKE, PORTO = (text for *_, text in SAID)


def _replies(home, questions: list[str]) -> list[str]:
    """The replies to `questions`, asked after SAID in one batch of files, as connectors drop them."""
    cortex("init", home=home)
    asked = [(ASKED_AT, "webchat", "user", question) for question in questions]
    for n, (sent_at, channel, sender, text) in enumerate(SAID + asked):
        envelope = {"channel": channel, "sender": sender, "text": text, "timestamp": sent_at}
        (home / "inbox" / channel).mkdir(parents=True, exist_ok=True)
        (home / "inbox" / channel / f"{n:02d}.json").write_text(json.dumps(envelope))
    # Nothing materialized before the answers: the live path. "Yesterday" counts from when the
    # question was sent, not from when it is answered.
    cortex("--now", ANSWERED_AT, "run", home=home, env=NEW_YORK)
    replies = json.loads(cortex("outbox", "webchat", "--json", home=home).stdout)
    return [r["text"] for r in replies][-len(questions) :]


def test_what_the_user_said_yesterday_and_all_that_is_known_are_the_answers(tmp_path):
    home = tmp_path / "home"
    yesterday, day_before, book, known, friday = _replies(
        home,
        [
            "What did I tell you yesterday?",
            "What did I say the day before yesterday?",
            "Which book did I mention yesterday?",
            "What do you know about me?",
            "What did I tell you three days ago?",
        ],
    )
    # Sunday in New York: Ana's visit was said at 22:00 there, already Monday in UTC, and the reply
    # dates it as the owner's Sunday.
    assert DUNE in yesterday and f"{ANA} (webchat, 2026-11-29;" in yesterday, yesterday
    for other_day in (DENTIST, BIKE):
        assert other_day not in yesterday, yesterday
    # every statement of that day (22:00 on Saturday there is Sunday in UTC), a since-updated one too
    assert DENTIST in day_before and f"{LISBON} (webchat, 2026-11-28; msg 1; since updated" in day_before
    # a day the owner said nothing on is no day to quote another day's statements for
    assert friday == "You didn't tell me anything on Friday 27 November, as far as I have it.", friday
    assert DUNE not in day_before and ANA not in day_before, day_before
    assert book.splitlines()[1].startswith(f"- {DUNE}"), book
    # Everything known: a list of the owner's statements, not the one closest to "know"; Lisbon is
    # history since the move to Porto.
    assert {PORTO, BIKE, ANA, DUNE, DENTIST} == {
        line[2:].split(" (webchat")[0] for line in known.splitlines()[1:]
    }
    for reply in (yesterday, day_before, book, known):
        assert "Mars" not in reply  # what a stranger or another agent said is not the user's
    asked = ["--now", ASKED_AT, "recall", "what did I tell you yesterday", "--json"]
    hits = json.loads(cortex(*asked, home=home, env=NEW_YORK).stdout)
    assert {hit["text"] for hit in hits[:2]} == {DUNE, ANA}, hits
    assert "Mars" not in json.dumps(hits), hits
    # A forgotten message is not what the user said that day any more.
    dune_turn = next(hit["sources"][0] for hit in hits if hit["text"] == DUNE)
    cortex("forget", "--turn", str(dune_turn), home=home)
    hits = json.loads(cortex(*asked, home=home, env=NEW_YORK).stdout)
    assert hits[0]["text"] == ANA and "Dune" not in json.dumps(hits), hits


MONDAY = date(2026, 11, 30)


@pytest.mark.parametrize(
    ("query", "days"),
    [
        ("What did I tell you yesterday?", [date(2026, 11, 29)]),
        ("what did we talk about last night", [date(2026, 11, 29)]),
        ("What did I say the day before yesterday?", [date(2026, 11, 28)]),
        ("what did I mention three days ago", [date(2026, 11, 27)]),
        ("what did I mention 10 days ago", [date(2026, 11, 20)]),
        ("What did I say last Monday?", [date(2026, 11, 23)]),
        ("What did I say on Friday?", [date(2026, 11, 27)]),
        ("What did I tell you this morning?", [MONDAY]),
        ("What did I tell you last week?", [date(2026, 11, 23 + n) for n in range(7)]),
        ("what did we talk about last weekend", [date(2026, 11, 28), date(2026, 11, 29)]),
        ("What did I say this week?", [MONDAY]),  # it is Monday
        ("What should I do this week?", []),
        ("What should I cook tonight?", []),  # today, but not a question about the past
        ("Book me a table on Friday", []),  # a Friday to come
        ("What did I say on 3 June?", []),  # a day by its date: named_times' business
    ],
)
def test_the_past_days_a_question_names(query, days):
    assert past_days(query, MONDAY) == days


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("What do you know about me?", True),
        ("what else do you remember about me", True),
        ("What have I told you?", True),
        ("Tell me about myself", True),
        ("What have I told you about my sister?", False),  # one thing: searched as usual
        ("What do you know about Python?", False),
        ("Do you know where I live?", False),
    ],
)
def test_a_question_about_everything_known_is_told_from_one_about_something(text, asks):
    assert asks_what_is_known(text) is asks
