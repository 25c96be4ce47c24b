"""Conversation intelligence: pattern tables, mood, thread lifecycle and decisions (no database)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from cortex_pipelines.publish.decisions import HIGH_IMPACT_KEYWORDS, Decision, extract_decisions, infer_impact
from cortex_pipelines.publish.mood import MOODS, detect_mood
from cortex_pipelines.publish.signals import LANGUAGES, extract_signals
from cortex_pipelines.publish.threads import Thread, infer_priority, matches_thread, update_threads
from cortex_pipelines.turn import Turn

T0 = datetime(2026, 3, 2, 9, 0)


def turn(n: int, text: str, at: datetime | None = None, sender: str | None = "alex") -> Turn:
    return Turn(
        id=n, role="user", channel="telegram", sender=sender, content=text, ts=at or T0 + timedelta(minutes=n)
    )


def thread(title: str, status: str = "open", priority: str = "medium", **changes) -> Thread:
    base = Thread(
        id=f"id-{title}",
        title=title,
        status=status,
        priority=priority,
        summary="",
        decisions=[],
        waiting_for=None,
        mood="neutral",
        last_activity=T0,
        created=T0,
        closed_at=T0 if status == "closed" else None,
        sources=[],
    )
    return dataclasses.replace(base, **changes)


def matches(kind: str, lang: str, text: str) -> bool:
    return any(p.search(text) for p in getattr(LANGUAGES[lang], kind))


# --- pattern tables -------------------------------------------------------------------------------


def test_tables_cover_english_and_german_and_are_frozen():
    assert {"en", "de"} <= LANGUAGES.keys()
    with pytest.raises(dataclasses.FrozenInstanceError):
        LANGUAGES["en"].close = ()  # type: ignore[misc]
    assert set(MOODS) == {"frustrated", "excited", "tense", "productive", "exploratory"}
    assert {"budget", "vertrag", "architecture", "sicherheit"} <= set(HIGH_IMPACT_KEYWORDS)


@pytest.mark.parametrize(
    "text",
    [
        "We decided to use TypeScript",
        "We'll go with Postgres",
        "Let's go with option B",
        "The plan is to ship on Friday",
        "Agreed, we ship on Monday",
        "Decision: drop the legacy API",
        "We settled on weekly releases",
    ],
)
def test_english_decisions(text):
    assert matches("decision", "en", text)


@pytest.mark.parametrize(
    "text",
    [
        "I'm still undecided",
        "We haven't decided yet",
        "They disagreed loudly",
        "The weather is nice today",
        "That was a tough decision to make",
    ],
)
def test_english_non_decisions(text):
    assert not matches("decision", "en", text)


@pytest.mark.parametrize(
    "text",
    [
        "Wir haben beschlossen, TS zu nehmen",
        "Ich habe mich entschieden",
        "Das machen wir so",
        "Wir machen das mit Postgres",
        "Der Plan ist, Freitag zu releasen",
        "Ansatz: erst messen, dann optimieren",
    ],
)
def test_german_decisions(text):
    assert matches("decision", "de", text)


@pytest.mark.parametrize(
    "text", ["Das ist noch nicht entschieden", "Es steht unentschieden", "Das Wetter ist schön"]
)
def test_german_non_decisions(text):
    assert not matches("decision", "de", text)


@pytest.mark.parametrize(
    "text", ["I'm done", "Login bug is fixed ✅", "It works now", "Resolved.", "PR merged"]
)
def test_english_closures(text):
    assert extract_signals(text, ("en",)).closures


@pytest.mark.parametrize(
    "text",
    [
        "The project was abandoned",
        "Our networks and frameworks are slow",
        "It's not done yet",
        "Almost done with the slides",
        "Is it done?",
        "Nothing to report",
    ],
)
def test_english_non_closures(text):
    assert not extract_signals(text, ("en",)).closures


@pytest.mark.parametrize("text", ["Ist erledigt", "Der Bug ist gelöst", "Funktioniert!", "Alles fertig"])
def test_german_closures(text):
    assert extract_signals(text, ("de",)).closures


@pytest.mark.parametrize(
    "text", ["Das Problem ist ungelöst", "Funktioniert noch nicht", "Noch nicht fertig", "Fast fertig"]
)
def test_german_non_closures(text):
    assert not extract_signals(text, ("de",)).closures


def test_waits_capture_what_is_awaited():
    text = "We're waiting for the API keys from Anna. We need the contract signed first."
    assert extract_signals(text).waits == ["the API keys from Anna", "the contract signed"]
    assert extract_signals("Still blocked by legal review").waits == ["legal review"]
    assert extract_signals("Ich warte auf die Freigabe.").waits == ["die Freigabe"]
    assert extract_signals("Wir brauchen erst das OK vom Chef").waits == ["das OK vom Chef"]
    assert extract_signals("I need a coffee").waits == []


@pytest.mark.parametrize(
    ("text", "topics"),
    [
        ("Let's get back to the auth migration and then lunch", ["auth migration"]),
        ("Regarding the Helios redesign, any news?", ["Helios redesign"]),
        ("Helios update: assets are in", ["Helios"]),
        ("Quick question about the Apollo project", ["Apollo"]),
        ("re: quarterly report", ["quarterly report"]),
        ("Wegen der Steuererklärung: ich melde mich", ["Steuererklärung"]),
        ("bzgl. Umzug nach Berlin", ["Umzug nach Berlin"]),
        ("Zurück zum Gartenprojekt, bitte", ["Gartenprojekt"]),
        ("Thanks, that's all", []),
        ("Back to it", []),
    ],
)
def test_topics(text, topics):
    assert extract_signals(text).topics == topics


def test_languages_restrict_the_tables():
    assert extract_signals("Wir haben beschlossen, TS zu nehmen", ("en",)).decisions == []
    assert extract_signals("We decided to use TS", ("de",)).decisions == []
    assert extract_signals("Wir haben beschlossen, TS zu nehmen").decisions == [
        "Wir haben beschlossen, TS zu nehmen"
    ]


def test_decision_excerpt_is_a_word_bounded_window():
    before = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    after = "to adopt the new build system for every service in the monorepo starting next sprint with ci "
    (excerpt,) = extract_signals(before + "we decided " + after * 2).decisions
    assert "we decided" in excerpt
    assert len(excerpt) <= 50 + len("we decided") + 100
    words = set((before + after).split())
    assert all(w in words for w in excerpt.replace("we decided", "").split())


# --- mood, impact, priority -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mood"),
    [
        ("This is damn annoying", "frustrated"),
        ("Das nervt, schon wieder kaputt", "frustrated"),
        ("Awesome, it shipped 🚀", "excited"),
        ("Careful, this migration is risky", "tense"),
        ("Vorsicht, das ist heikel", "tense"),
        ("Deployed and merged ✅", "productive"),
        ("What if we cached it?", "exploratory"),
        ("Idee: vielleicht mit Redis", "exploratory"),
        ("This sucks but then it works!", "productive"),
        ("It works, but damn", "frustrated"),
        ("The frameworks handle networks", "neutral"),
        ("Meeting at three", "neutral"),
        ("", "neutral"),
    ],
)
def test_detect_mood(text, mood):
    assert detect_mood(text) == mood


@pytest.mark.parametrize(
    ("text", "impact"),
    [
        ("We decided to raise the budget", "high"),
        ("Der Vertrag wird gekündigt", "high"),
        ("We deleted the old bucket", "high"),
        ("Decided: tabs, not spaces", "medium"),
        ("The majority prefers tabs", "medium"),
        ("Urgent: security patch goes out tonight", "critical"),
        ("Kritisch: Produktion läuft nicht", "critical"),
        ("Urgent: buy milk", "medium"),
    ],
)
def test_infer_impact(text, impact):
    assert infer_impact(text) == impact


@pytest.mark.parametrize(
    ("text", "priority"),
    [
        ("Back to the outage, this is urgent", "critical"),
        ("Dringend: Server down", "critical"),
        ("Regarding the grant, deadline is Friday", "high"),
        ("Someday we should redo the garden", "low"),
        ("Irgendwann mal den Keller aufräumen", "low"),
        ("Back to the garden plan", "medium"),
    ],
)
def test_infer_priority(text, priority):
    assert infer_priority(text) == priority


def test_matches_thread_by_title_words():
    helios = thread("Helios Redesign")
    assert matches_thread(helios, "the helios, redesign! is moving")
    assert matches_thread(helios, "HELIOS-redesign review")
    assert not matches_thread(helios, "Helios is a sun god")
    assert matches_thread(thread("Apollo"), "Apollo launch moved")
    assert not matches_thread(thread("to do it"), "to do it")  # only words over two letters count
    assert not matches_thread(thread("auth migration plan"), "the migration", min_overlap=2)


# --- thread lifecycle -----------------------------------------------------------------------------


def test_thread_lifecycle_from_topic_to_closure():
    t1 = update_threads([], [turn(1, "Back to the Helios redesign, it needs a new palette.")], now=T0)
    (opened,) = t1
    assert (opened.title, opened.status, opened.priority) == ("Helios redesign", "open", "medium")
    assert opened.sources == [1]

    t2 = update_threads(t1, [turn(2, "For the Helios redesign we decided to use the teal palette.")], now=T0)
    assert t2[0].decisions == ["For the Helios redesign we decided to use the teal palette."]
    assert t1[0].decisions == [] and t1[0].sources == [1]  # the input is not mutated

    t3 = update_threads(t2, [turn(3, "Helios redesign: waiting for the brand assets from Mia.")], now=T0)
    assert t3[0].waiting_for == "the brand assets from Mia"

    t4 = update_threads(t3, [turn(4, "Helios redesign is done ✅")], now=T0)
    (closed,) = t4
    assert closed.status == "closed"
    assert closed.closed_at == closed.last_activity == T0 + timedelta(minutes=4)
    assert closed.mood == "productive"
    assert closed.sources == [1, 2, 3, 4]
    assert closed.id == opened.id
    assert t3[0].status == "open"


def test_unrelated_turns_leave_threads_alone():
    start = update_threads([], [turn(1, "Back to the Helios redesign")], now=T0)
    elsewhere = [turn(2, "The tax return is done ✅"), turn(3, "We decided on pizza")]
    after = update_threads(start, elsewhere, now=T0)
    assert after == start


def test_same_topic_updates_the_open_thread_instead_of_duplicating():
    turns = [turn(1, "Back to the auth migration"), turn(2, "re: Auth Migration, any news?")]
    (only,) = update_threads([], turns, now=T0)
    assert only.sources == [1, 2]


def test_topic_after_closure_opens_a_new_thread():
    turns = [
        turn(1, "Back to the login bug"),
        turn(2, "login bug is fixed ✅"),
        turn(3, "Back to the login bug"),
    ]
    first, second = update_threads([], turns, now=T0)
    assert (first.status, second.status) == ("closed", "open")
    assert first.id != second.id


def test_quoted_text_does_not_close_threads():
    start = update_threads([], [turn(1, "Back to the login bug")], now=T0)
    quoted = update_threads(start, [turn(2, "> login bug is fixed ✅\nreally? the login bug")], now=T0)
    assert quoted[0].status == "open"


def test_prune_closed_threads_older_than_prune_days():
    now = T0 + timedelta(days=30)
    threads = [
        thread("old closed", "closed", closed_at=now - timedelta(days=8)),
        thread("recent closed", "closed", closed_at=now - timedelta(days=2)),
        thread("old open", last_activity=now - timedelta(days=29)),
    ]
    kept = update_threads(threads, [], now=now, prune_days=7)
    assert [t.title for t in kept] == ["recent closed", "old open"]


def test_cap_drops_oldest_closed_first_then_lowest_priority_open():
    threads = [
        thread("closed recent", "closed", closed_at=T0 + timedelta(days=3)),
        thread("open medium old", last_activity=T0),
        thread("closed oldest", "closed", closed_at=T0 + timedelta(days=1)),
        thread("open low new", "open", "low", last_activity=T0 + timedelta(days=4)),
        thread("open high", "open", "high"),
    ]
    now = T0 + timedelta(days=5)

    def titles(cap):
        return [t.title for t in update_threads(threads, [], now=now, max_threads=cap)]

    assert titles(4) == ["closed recent", "open medium old", "open low new", "open high"]
    assert titles(3) == ["open medium old", "open low new", "open high"]
    assert titles(2) == ["open medium old", "open high"]
    assert titles(50) == [t.title for t in threads]


def test_cap_at_fifty_after_many_topics():
    turns = [turn(n, f"Back to project number{n:02d} alpha") for n in range(55)]
    assert len(update_threads([], turns, now=T0 + timedelta(hours=2))) == 50


def test_thread_ids_are_deterministic():
    turns = [
        turn(1, "Back to the Helios redesign"),
        turn(2, "Regarding the garden plan"),
        turn(3, "Helios redesign: we decided on teal"),
    ]
    first = update_threads([], turns, now=T0)
    second = update_threads([], turns, now=T0)
    assert [t.id for t in first] == [t.id for t in second]
    assert first == second
    assert len({t.id for t in first}) == 2


# --- decisions ------------------------------------------------------------------------------------


def test_extract_decisions_fields():
    text = "For Helios we decided to move the budget to Q3 because the agency is late. Lunch?"
    (decision,) = extract_decisions([turn(7, text, sender="sam")], [])
    assert "decided to move the budget to Q3" in decision.what
    assert decision.why == "because the agency is late"
    assert (decision.impact, decision.who) == ("high", "sam")
    assert (decision.source, decision.channel) == (7, "telegram")
    assert decision.decided_at == T0 + timedelta(minutes=7)


def test_decision_without_sender_is_attributed_to_the_role():
    (decision,) = extract_decisions([turn(1, "We'll go with Postgres.", sender=None)], [])
    assert decision.who == "user"


def test_decisions_dedupe_within_24h_but_not_across_25h():
    text = "We decided to use Postgres for the ledger."
    again_soon = [turn(1, text), turn(2, text, at=T0 + timedelta(hours=1))]
    assert len(extract_decisions(again_soon, [])) == 1

    again_later = [turn(1, text), turn(2, text, at=T0 + timedelta(hours=25))]
    assert len(extract_decisions(again_later, [])) == 2


def test_decisions_dedupe_against_existing_and_rerun_is_empty():
    turns = [turn(1, "Wir haben beschlossen, den Vertrag zu kündigen.")]
    (first,) = extract_decisions(turns, [])
    assert first.impact == "high"
    assert extract_decisions(turns, [first]) == []
    assert extract_decisions(turns, []) == [first]  # same turn, same id


def test_existing_decision_outside_window_does_not_block():
    old = Decision(
        id="x",
        what="We decided to use Postgres.",
        why="",
        impact="medium",
        who="alex",
        decided_at=T0 - timedelta(hours=25),
        source=0,
        channel="telegram",
    )
    assert len(extract_decisions([turn(1, "We decided to use Postgres.", at=T0)], [old])) == 1


def test_questions_and_quotes_are_not_decisions():
    turns = [turn(1, "Have we decided on the database?"), turn(2, "> we decided on Go\nok, noted")]
    assert extract_decisions(turns, []) == []


def test_abbreviations_and_decimals_end_no_decision_sentence():
    said = "We decided to book Dr. Kahnwald for 3.5 hours because she knows the case. Lunch?"
    (decision,) = extract_decisions([turn(1, said)], [])
    assert decision.what == said  # the whole excerpt, not cut at "Dr." or in "3.5"
    assert decision.why == "because she knows the case"
    assert extract_decisions([turn(2, "Have we decided on Dr. Kahnwald for 3.5 hours?")], []) == []
