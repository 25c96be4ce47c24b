"""Knowledge updates (DESIGN.md, "Forget, erase, supersede"): a newer statement about the same
subject supersedes the older one. Recall, the floor and the bulletin show the current value first;
the older one stays queryable as history."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import duckdb
import pytest

from bench.paraphrase import load_distractors, load_updates
from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.instance import init_home
from cortex_pipelines.llm.anthropic_client import AnthropicClient
from cortex_pipelines.llm.offline import OfflineClient
from cortex_pipelines.memory.embedder import embedder_for
from cortex_pipelines.memory.extract import InjectedText, extract_offline
from cortex_pipelines.memory.patterns import ATTRIBUTES, attributes_of, naming_any
from cortex_pipelines.memory.pipeline import extract_new_facts
from cortex_pipelines.memory.recall import recall
from cortex_pipelines.memory.recall_config import RecallConfig
from cortex_pipelines.memory.updates import (
    announces_change,
    changed_person,
    changed_subject,
    co_recalled_updates,
    ended_names,
    moves_plan_of,
    newest_successors,
    returned_to,
    same_subject,
    statements_of,
    subject_of,
    superseded_statement,
)
from cortex_pipelines.memory.vectors import vector_store
from cortex_pipelines.storage import Database, updates
from cortex_pipelines.storage.facts import hot_for_floor
from cortex_pipelines.turn import Turn
from tests.support.cli import cortex
from tests.support.inbox import drop, msg
from tests.support.messages_server import text as text_reply


def _json(proc) -> list[dict]:
    return json.loads(proc.stdout)


@dataclass
class Found:
    """A recall hit, as update detection reads it."""

    text: str
    sources: list[int]
    channel: str = "webchat"
    sender: str = "user"
    fact_id: int | None = None
    updated_by: int | None = None


def _drain(settings, db, said: list[tuple[str, str]]) -> None:
    """The owner's messages (text, ISO time) through the inbox and one drain of the offline brain:
    the live path, nothing materialized."""
    for n, (text, at) in enumerate(said):
        drop(settings, "webchat", f"{n}.json", msg("webchat", text, f"said-{n}", timestamp=at))
    ingest_inbox(settings, db)
    Brain(db, settings, OfflineClient()).drain()


@pytest.mark.slow
def test_a_move_announced_later_is_answered_first_and_the_old_home_stays_history(tmp_path):
    """The issue's case through the CLI: Lisbon, ten days later Porto. The reply, recall and the
    bulletin say Porto first; Lisbon is still found, marked as updated; an unrelated change
    ("started journaling") updates nothing, and the peanut allergy stays current."""
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("--now", "-12d", "send", "webchat", "I live in Lisbon, right by the river.", home=home)
    cortex(
        "--now",
        "-12d",
        "send",
        "webchat",
        "I'm severely allergic to peanuts, so never suggest satay.",
        home=home,
    )
    cortex(
        "--now", "-2d", "send", "webchat", "I moved to Porto last week, the new flat is lovely.", home=home
    )
    cortex("--now", "-2d", "send", "webchat", "I've started journaling before bed.", home=home)
    cortex("send", "webchat", "where do I live?", home=home)
    cortex("run", home=home)

    replies = {r["reply_to"]: r["text"] for r in _json(cortex("outbox", "--json", home=home))}
    answer = replies[max(replies)]
    assert "Porto" in answer, answer
    assert "Lisbon" not in answer or answer.index("Porto") < answer.index("Lisbon"), answer

    hits = _json(cortex("recall", "where do I live", "-k", "5", "--json", home=home))
    assert "Porto" in hits[0]["text"], hits
    lisbon = next(h for h in hits if "Lisbon" in h["text"])  # history stays queryable
    assert lisbon["updated_by"] in hits[0]["sources"]
    allergy = _json(cortex("recall", "what am I allergic to", "-k", "3", "--json", home=home))
    assert "peanuts" in allergy[0]["text"] and "updated_by" not in allergy[0]

    bulletin = (home / "out" / "memory_bulletin.md").read_text()
    assert "Porto" in bulletin and "Lisbon" not in bulletin, bulletin
    with duckdb.connect(str(home / "cortex.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM statement_updates").fetchone()[0] == 1
        closed = con.execute("SELECT text FROM facts WHERE valid_to IS NOT NULL").fetchall()
        assert [t for (t,) in closed] == ["I live in Lisbon, right by the river."]


def _first_memory_answered(home, question: str) -> tuple[str, str]:
    """`question` sent and answered by `cortex run`: the first memory its reply quotes, and the reply."""
    cortex("send", "webchat", question, home=home)
    cortex("run", home=home)
    answer = _json(cortex("outbox", "--json", home=home))[-1]["text"]
    return answer.splitlines()[1], answer


@pytest.mark.parametrize(
    "together",
    [pytest.param(False, id="answered-between"), pytest.param(True, id="one-batch")],
)
@pytest.mark.soak
def test_a_change_of_one_part_of_a_sentence_leaves_the_other_part_current(tmp_path, together):
    """A move after "I live in Lisbon and my locker code is 4471": the offline extraction drew one
    fact from the sentence, and the move closed all of it, so the locker code left the bulletin and
    was answered as "no longer current". Whether the move is answered after the first message's
    facts exist, or in the same batch (then the extraction asset closes the fact)."""
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("--now", "-3d", "send", "webchat", "I live in Lisbon and my locker code is 4471.", home=home)
    if not together:
        cortex("--now", "-3d", "run", home=home)
    cortex("send", "webchat", "Actually I moved to Porto last week.", home=home)
    cortex("run", home=home)

    first, answer = _first_memory_answered(home, "What is my locker code?")
    assert "My locker code is 4471" in first and "since updated" not in first, answer
    code = _json(cortex("recall", "what is my locker code", "-k", "3", "--json", home=home))[0]
    assert code["text"] == "My locker code is 4471." and "updated_by" not in code, code
    home_now = _json(cortex("recall", "where do I live", "-k", "3", "--json", home=home))
    assert "Porto" in home_now[0]["text"], home_now
    bulletin = (home / "out" / "memory_bulletin.md").read_text()
    assert "My locker code is" in bulletin and "Porto" in bulletin and "Lisbon" not in bulletin, bulletin
    with duckdb.connect(str(home / "cortex.duckdb"), read_only=True) as con:
        closed = con.execute("SELECT text FROM facts WHERE valid_to IS NOT NULL").fetchall()
        assert closed == [("I live in Lisbon and my locker code is 4471.",)]  # history stays

    # The move erased: the sentence is current again, whole, and its split-off part leaves memory.
    cortex("erase", "--matching", "moved to Porto", "--yes", home=home)
    code = _json(cortex("recall", "what is my locker code", "-k", "3", "--json", home=home))
    whole = "I live in Lisbon and my locker code is 4471."
    assert [h["text"] for h in code if "locker" in h["text"]] == [whole], code
    assert "updated_by" not in code[0], code


@pytest.mark.parametrize(
    "together",
    [pytest.param(False, id="answered-between", marks=pytest.mark.soak), pytest.param(True, id="one-batch")],
)
def test_a_statement_said_again_after_a_change_is_current_again(tmp_path, together):
    """ "I live in Lisbon.", then "I moved to Porto last week.", then "I live in Lisbon." again: the
    restatement had been folded into the closed Lisbon fact, so "where do I live?" answered Porto
    and the user's latest word was "no longer current". In one batch, a move to Berlin between
    them: the restatement updates the newest change."""
    home = tmp_path / "home"
    said = [("-20d", "I live in Lisbon."), ("-10d", "I moved to Porto last week.")]
    if together:
        said.append(("-5d", "I've moved to Berlin now."))
    for when, text in said:
        cortex("--now", when, "send", "webchat", text, home=home)
        if not together:
            cortex("--now", when, "run", home=home)
    cortex("send", "webchat", "I live in Lisbon.", home=home)
    if not together:
        cortex("run", home=home)

    first, answer = _first_memory_answered(home, "where do I live?")
    assert "I live in Lisbon." in first and "since updated" not in first, answer
    hits = _json(cortex("recall", "where do I live", "-k", "5", "--json", home=home))
    assert hits[0]["text"] == "I live in Lisbon." and "updated_by" not in hits[0], hits
    moves = [h for h in hits if "moved" in h["text"]]
    assert moves and all("updated_by" in h for h in moves), hits  # history, no longer current
    bulletin = (home / "out" / "memory_bulletin.md").read_text()
    assert "Lisbon" in bulletin and "Porto" not in bulletin and "Berlin" not in bulletin, bulletin

    # The restatement erased: the newest move is current again, and Lisbon history again.
    cortex("erase", "--turn", str(max(hits[0]["sources"])), "--yes", home=home)
    hits = _json(cortex("recall", "where do I live", "-k", "5", "--json", home=home))
    (lisbon,) = [h for h in hits if h["text"] == "I live in Lisbon."]
    newest = [h for h in hits if ("Berlin" if together else "Porto") in h["text"]]
    assert "updated_by" in lisbon and newest and "updated_by" not in newest[0], hits


@pytest.mark.soak
def test_a_return_to_an_earlier_value_in_other_words_is_current_again_and_a_visit_is_not(tmp_path):
    """ "I live in Lisbon.", "I moved to Porto last week.", then "Porto didn't work out, I'm living in
    Lisbon again.": said with no change word and in other words than the first time, it linked
    nothing, and "where do I live?" still answered Porto first. A visit ("I was in Lisbon again for a
    wedding") is no return."""
    home = tmp_path / "home"
    said = [("-20d", "I live in Lisbon."), ("-10d", "I moved to Porto last week.")]
    said.append(("-5d", "I was in Lisbon again for a wedding."))
    for when, text in said:
        cortex("--now", when, "send", "webchat", text, home=home)
    cortex("run", home=home)
    hits = _json(cortex("recall", "where do I live", "-k", "5", "--json", home=home))
    assert "Porto" in hits[0]["text"] and "updated_by" not in hits[0], hits

    cortex("send", "webchat", "Porto didn't work out, I'm living in Lisbon again.", home=home)
    first, answer = _first_memory_answered(home, "where do I live?")
    assert "Lisbon" in first and "since updated" not in first and "wedding" not in first, answer
    hits = _json(cortex("recall", "where do I live", "-k", "5", "--json", home=home))
    assert "Lisbon" in hits[0]["text"] and "updated_by" not in hits[0], hits
    (move,) = [h for h in hits if "moved to Porto" in h["text"]]
    assert "updated_by" in move, hits  # history, no longer current
    bulletin = (home / "out" / "memory_bulletin.md").read_text()
    assert "Lisbon" in bulletin and "moved to Porto" not in bulletin, bulletin


def _the_job_told_first_and_google_as_history(home, change: str, says: str) -> None:
    """`change` told, then "where do I work?" answered by `cortex run`: the first memory quoted says
    `says`, and "I work at Google as a data engineer." comes after it, marked as since updated."""
    cortex("send", "webchat", change, home=home)
    first, answer = _first_memory_answered(home, "where do I work?")
    assert says in first, answer
    assert "I work at Google as a data engineer. (webchat" in answer and "since updated" in answer, answer


@pytest.mark.soak
def test_quitting_what_the_user_named_before_ends_it_and_a_relatives_quitting_does_not(tmp_path):
    """ "I work at Google as a data engineer.", then "I quit Google last week, taking a break before
    the next thing.": the two share little but the name (cosine 0.34, under the strict threshold),
    so "where do I work?" was answered with Google as the current job. A brother quitting Google
    is his news."""
    home = tmp_path / "home"
    cortex("--now", "-20d", "send", "webchat", "I work at Google as a data engineer.", home=home)
    cortex("--now", "-15d", "send", "webchat", "My brother Leo quit Google last month.", home=home)
    cortex("run", home=home)
    hits = _json(cortex("recall", "where do I work", "-k", "5", "--json", home=home))
    (job,) = [h for h in hits if "data engineer" in h["text"]]
    assert "updated_by" not in job, hits

    _the_job_told_first_and_google_as_history(
        home, "I quit Google last week, taking a break before the next thing.", "I quit Google"
    )
    hits = _json(cortex("recall", "where do I work", "-k", "5", "--json", home=home))
    (job,) = [h for h in hits if "data engineer" in h["text"]]
    assert "updated_by" in job, hits  # history, no longer current
    bulletin = (home / "out" / "memory_bulletin.md").read_text()
    assert "data engineer" not in bulletin, bulletin


@pytest.mark.soak
def test_leaving_an_employer_for_another_ends_the_old_job_and_a_trip_leaves_home_current(tmp_path):
    """ "I work at Google as a data engineer.", then "I left Google in October and joined Stripe.":
    0.19 from "where do I work?" and sharing only the name with the old job, it linked nothing, and
    the reply said Google. "Left Paris this morning, now in Lyon" is a trip: home stays Paris."""
    home = tmp_path / "home"
    cortex("--now", "-20d", "send", "webchat", "I work at Google as a data engineer.", home=home)
    cortex("--now", "-20d", "send", "webchat", "I live in Paris with my partner.", home=home)
    cortex("--now", "-20d", "run", home=home)
    cortex("send", "webchat", "Left Paris this morning, now in Lyon for the conference.", home=home)
    _the_job_told_first_and_google_as_history(
        home, "I left Google in October and joined Stripe.", "joined Stripe"
    )
    hits = _json(cortex("recall", "where do I live", "-k", "5", "--json", home=home))
    (paris,) = [h for h in hits if "I live in Paris" in h["text"]]
    assert "updated_by" not in paris, hits


def test_leaving_an_employer_with_nothing_next_ends_the_job_and_leaving_a_city_ends_no_home(tmp_path):
    """ "I work at Google as a data engineer.", then "I left Google last month.": "left" was no change
    word (it ends nothing in "I left my keys at work"), so "where do I work?" was answered with
    Google as the current job. Leaving a city on a trip still leaves home where it was. Files as a
    connector drops them, answered in one `cortex run` with nothing materialized before."""
    home = tmp_path / "home"
    cortex("init", home=home)
    said = [
        ("2026-11-01T09:00:00+00:00", "I work at Google as a data engineer."),
        ("2026-11-01T09:01:00+00:00", "I live in Paris with my partner."),
        ("2026-11-20T08:00:00+00:00", "I left Paris this morning, off to Lyon for the weekend."),
        ("2026-11-20T08:01:00+00:00", "I left Google last month."),
        ("2026-11-20T08:02:00+00:00", "Where do I work?"),
    ]
    (home / "inbox" / "webchat").mkdir(parents=True)
    for n, (at, text) in enumerate(said):
        envelope = {"channel": "webchat", "sender": "user", "text": text, "timestamp": at}
        (home / "inbox" / "webchat" / f"{n}.json").write_text(json.dumps(envelope))
    cortex("--now", "2026-11-20T08:03:00+00:00", "run", home=home)
    answer = _json(cortex("outbox", "--json", home=home))[-1]["text"]
    assert answer.splitlines()[1].startswith("- I left Google last month."), answer
    assert "I work at Google as a data engineer. (webchat" in answer and "since updated" in answer, answer
    asked = ["--now", "2026-11-20T08:04:00+00:00", "recall", "where do I live", "--json"]
    hits = _json(cortex(*asked, home=home))
    (paris,) = [h for h in hits if "I live in Paris" in h["text"]]
    assert "updated_by" not in paris, hits


@pytest.mark.parametrize(
    ("said", "earlier", "ends"),
    [
        ("I left Google last month.", "I work at Google as a data engineer.", True),
        ("I've finally left Deloitte.", "I'm a senior consultant at Deloitte.", True),
        ("We just left Acme.", "My employer is Acme.", True),
        # a place left on a trip, an errand, a colleague's job: no ending
        ("I left Paris this morning.", "I live in Paris.", False),
        ("I left Paris this morning.", "I work in Paris.", False),
        ("I left Google's office at six.", "I work at Google as a data engineer.", False),
        ("I left my laptop at work.", "I work at Google as a data engineer.", False),
        ("I left Google last month.", "My colleague Ben works at Google.", False),
    ],
)
def test_which_statements_leaving_a_name_ends(said, earlier, ends):
    config = RecallConfig()
    owner = lambda channel, sender: sender == "user"  # noqa: E731
    found = [Found(earlier, [1])]
    old = superseded_statement(
        said,
        9,
        found,
        owner,
        embedder_for(load_settings()).encode,
        config.update_min_cosine,
        config.update_same_attribute_min_cosine,
    )
    assert (old is not None and old[0] == [1]) is ends


@pytest.mark.parametrize(
    ("text", "ended"),
    [
        ("I quit Google last week, taking a break.", {"google"}),
        ("Sold the Golf yesterday, I cycle everywhere now.", {"golf"}),
        ("I'm done with Duolingo. Anna says hi.", {"duolingo"}),
        ("I no longer work at BMW.", {"bmw"}),
        # a visit or an errand ends nothing; nor does a sentence that names nothing past its start
        ("I stopped by Anna's place after work.", set()),
        ("I dropped off the kids at Anna's.", set()),
        ("Google let me go, so I quit.", set()),
        # leaving a name for another is an ending; leaving a place on a trip, or someone's place, not
        ("I left Google in October and joined Stripe.", {"google", "october", "stripe"}),
        ("I left Deloitte to start my own firm.", {"deloitte"}),
        ("Left Paris this morning, now in Lyon for the conference.", set()),
        ("I left Sam's party early and started the drive home.", set()),
    ],
)
def test_which_names_a_change_ends(text, ended):
    assert ended_names(text) == ended


@pytest.mark.parametrize(
    ("text", "returns_to"),
    [
        ("Porto didn't work out, I'm living in Lisbon again.", "I live in Lisbon."),
        ("Back on night shifts from Monday.", "I work night shifts."),
        ("I moved back to Lisbon in the spring.", "I live in Lisbon."),
        ("I started eating fish again, doctor's advice.", "I eat fish."),
        ("Sam and I are back together!", "My girlfriend Sam and I have been together for two years."),
        # a visit, a plan put off, someone else's news, a question: no return
        ("I was in Lisbon again for a wedding.", None),
        ("We pushed the Lisbon trip back to the 21st.", None),
        ("My sister is living in Lisbon again.", None),
        ("Am I living in Lisbon again?", None),
        # a return word, but to nothing the user said before the change
        ("I burnt the toast again.", None),
    ],
)
def test_which_superseded_statement_a_return_in_other_words_brings_back(text, returns_to):
    """Among statements a change superseded, the one a turn returns to in other words (real
    embedder): the user's own state again, not a visit, a new date or another person's news."""
    config = RecallConfig()
    superseded = [
        "I live in Lisbon.",
        "I eat fish.",
        "I work night shifts.",
        "My girlfriend Sam and I have been together for two years.",
        "My Lisbon trip is on the 7th.",
    ]
    found = returned_to(
        text,
        superseded,
        embedder_for(load_settings()).encode,
        config.update_min_cosine,
        config.update_same_attribute_min_cosine,
    )
    assert (None if found is None else superseded[found]) == returns_to


@pytest.mark.parametrize(
    ("text", "statements"),
    [
        ("I live in Lisbon and my locker code is 4471.", ["I live in Lisbon", "my locker code is 4471."]),
        ("I'm vegetarian but my husband eats meat.", ["I'm vegetarian", "my husband eats meat."]),
        ("We moved to Porto; our flat has a view", ["We moved to Porto", "our flat has a view"]),
        ("I like tea, and I like coffee", ["I like tea", "I like coffee"]),
        # parts that are no statements of their own stay together
        ("My sister and I live in Paris.", ["My sister and I live in Paris."]),
        ("My sister Ana and I live in Paris.", ["My sister Ana and I live in Paris."]),
        ("My mother and my father live in Rome.", ["My mother and my father live in Rome."]),
        ("I live in Lisbon and work at Acme.", ["I live in Lisbon and work at Acme."]),
        ("Tom and I went hiking", ["Tom and I went hiking"]),
        ("Bread and I", ["Bread and I"]),
        ("; I live here", ["; I live here"]),
    ],
)
def test_which_statements_a_sentence_joins(text, statements):
    assert statements_of(text) == statements


def test_a_chain_of_updates_resolves_to_the_newest_in_the_next_message(settings, db):
    """Lisbon → Porto → Berlin, in one drain and nothing materialized: asked where the user lives,
    the context's recalled memories put Berlin first."""
    turns = [
        ("I live in Lisbon, right by the river.", "2026-01-05T09:00:00Z"),
        ("I moved to Porto last week, the new flat is lovely.", "2026-03-05T09:00:00Z"),
        ("I moved to Berlin now, the flat in Porto is given up.", "2026-06-05T09:00:00Z"),
        ("where do I live?", "2026-06-06T09:00:00Z"),
    ]
    _drain(settings, db, turns)
    hits = recall(db, settings, "where do I live", k=3)
    assert "Berlin" in hits[0].text, [h.text for h in hits]
    assert all(
        h.updated_by == hits[0].sources[0] for h in hits[1:] if "Lisbon" in h.text or "Porto" in h.text
    )


def test_in_a_chat_of_two_owners_one_persons_change_supersedes_only_their_own_statement(tmp_path):
    """Two owners in one chat (a couple, LoCoMo's speakers): Ben moving to Porto is not Ana moving,
    and her "I live in Lisbon" stays current; her own move updates it."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[owners]\nwebchat = ["ana", "ben"]\n')
    settings = load_settings(home)
    init_home(settings)
    db = Database(settings.paths.db)
    said = [
        ("ana", "I live in Lisbon, right by the river.", "2026-01-05T09:00:00Z"),
        ("ben", "I moved to Porto last week, the new flat is lovely.", "2026-03-05T09:00:00Z"),
    ]
    for n, (who, text, at) in enumerate(said):
        drop(
            settings,
            "webchat",
            f"{n}.json",
            {**msg("webchat", text, f"said-{n}", timestamp=at), "sender": who},
        )
        ingest_inbox(settings, db)
        Brain(db, settings, OfflineClient()).drain()
        # A run between them has drawn a fact from Ana's turn: it is hers too, not Ben's to update.
        extract_new_facts(db, vector_store(settings.paths.lance), embedder_for(settings), settings, None)
    assert db.query("SELECT count(*) FROM statement_updates") == [(0,)]
    assert db.query("SELECT count(*) FROM facts WHERE valid_to IS NOT NULL") == [(0,)]

    drop(
        settings,
        "webchat",
        "2.json",
        {**msg("webchat", "I moved to Porto too, next door to Ben.", "said-2"), "sender": "ana"},
    )
    ingest_inbox(settings, db)
    Brain(db, settings, OfflineClient()).drain()
    assert db.query("SELECT old_session_id FROM statement_updates") == [(1,)]


def test_an_update_the_write_time_check_missed_is_answered_first_when_one_question_finds_both(settings, db):
    """A doctor "put me on cetirizine instead": the write-time check links it to the closest
    earlier statement, the citalopram (0.51 against the loratadine's 0.48), and leaves the loratadine
    current. Asked about allergies, one question finds the loratadine and the cetirizine: in the same
    drain (nothing materialized), the reply and recall say cetirizine first, and the loratadine
    stays as it was, not marked as updated (an inference, not a link)."""
    said = [
        ("I take loratadine for hay fever.", "2026-01-05T09:00:00Z"),
        ("I take 20mg of citalopram every morning.", "2026-02-05T09:00:00Z"),
        ("My doctor put me on cetirizine instead.", "2026-05-05T09:00:00Z"),
        ("what do I take for my allergies?", "2026-05-06T09:00:00Z"),
    ]
    _drain(settings, db, said)
    linked = db.query("SELECT s.content FROM statement_updates u JOIN session s ON s.id = u.old_session_id")
    assert ("I take loratadine for hay fever.",) not in linked, "the write-time check found it: no case"

    reply = db.query("SELECT text FROM outbox ORDER BY id DESC LIMIT 1")[0][0]
    assert "cetirizine" in reply, reply
    assert "loratadine" not in reply or reply.index("cetirizine") < reply.index("loratadine"), reply
    hits = recall(db, settings, "what do I take for my allergies?", k=5)
    texts = [h.text for h in hits]
    assert texts.index("My doctor put me on cetirizine instead.") < texts.index(
        "I take loratadine for hay fever."
    ), texts
    assert all(h.updated_by is None for h in hits if "loratadine" in h.text)


# A change that shares no word with the statement it replaces, among statements sharing its words.
INSURANCE_CHANGE = [
    ("Our home insurance is with Direct Line.", "2026-01-05T09:00:00Z"),
    ("The gym renewed my membership automatically.", "2026-02-01T09:00:00Z"),
    ("My passport was renewed when I turned thirty.", "2026-02-02T09:00:00Z"),
    ("The library renewed my books when I asked.", "2026-02-03T09:00:00Z"),
    ("LV Stores has a sale on coats.", "2026-02-04T09:00:00Z"),
    ("The council renewed the parking permits when the year began.", "2026-02-05T09:00:00Z"),
    ("Our lease renewed when the landlord agreed to it.", "2026-02-06T09:00:00Z"),
    ("We renewed our vows when we turned fifty.", "2026-02-07T09:00:00Z"),
    ("My LV jacket tore when I fell off the bike.", "2026-02-08T09:00:00Z"),
    ("The magazine subscription renewed when I forgot to stop it.", "2026-02-09T09:00:00Z"),
    ("The warranty on the boiler renewed when it was serviced.", "2026-02-10T09:00:00Z"),
    ("We went with LV when the policy renewed.", "2026-05-05T09:00:00Z"),
    ("who insures our house?", "2026-05-06T09:00:00Z"),
]


def test_a_change_sharing_only_its_attribute_updates_the_statement_its_words_do_not_find(settings, db):
    """The change "We went with LV when the policy renewed" shares no word with "Our home insurance
    is with Direct Line" (cosine 0.31), and the write-time search by its words finds five other
    statements first. Both name insurance ("policy", "insurance"): the earlier statements naming it
    are candidates too, so the link is made, and in the same drain the house's insurer is LV first."""
    _drain(settings, db, INSURANCE_CHANGE)
    linked = db.query(
        "SELECT o.content, n.content FROM statement_updates u "
        "JOIN session o ON o.id = u.old_session_id JOIN session n ON n.id = u.new_session_id"
    )
    assert linked == [("Our home insurance is with Direct Line.", "We went with LV when the policy renewed.")]
    hits = recall(db, settings, "who insures our house?", k=5)
    assert "LV" in hits[0].text, [h.text for h in hits]
    assert any("Direct Line" in h.text and h.updated_by == hits[0].sources[0] for h in hits[1:])


@pytest.mark.slow
def test_cortex_recall_names_the_new_insurer_first_after_a_batch_a_connector_dropped(tmp_path):
    """The same case as the user meets it: the statements arrive as one connector batch
    (`cortex ingest`), one `cortex run` answers them and materializes memory, and `cortex recall` in
    a new process names LV first, with Direct Line kept and marked as updated by it."""
    home = tmp_path / "home"
    batch = tmp_path / "said.jsonl"
    batch.write_text(
        "".join(
            json.dumps({"channel": "webchat", "sender": "user", "text": text, "timestamp": at}) + "\n"
            for text, at in INSURANCE_CHANGE[:-1]
        )
    )
    cortex("ingest", str(batch), home=home)
    cortex("run", home=home)
    hits = _json(cortex("recall", "who insures our house?", "-k", "5", "--json", home=home))
    assert "LV" in hits[0]["text"], hits
    direct_line = next(h for h in hits if "Direct Line" in h["text"])
    assert direct_line["updated_by"] in hits[0]["sources"], hits


@pytest.mark.slow
def test_cortex_recall_answers_the_newer_medication_first_when_the_write_time_check_missed_it(tmp_path):
    """The same case as the user meets it: `cortex send`, `cortex run`, then `cortex recall` in a new
    process (everything materialized): the cetirizine comes first and the loratadine is not marked.
    So does the new coffee order, which shares neither words nor much meaning with the old one
    (cosine 0.16 without the change words), when the question names what both are about."""
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("--now", "-40d", "send", "webchat", "I take loratadine for hay fever.", home=home)
    cortex("--now", "-35d", "send", "webchat", "My usual order is a flat white.", home=home)
    cortex("--now", "-30d", "send", "webchat", "I take 20mg of citalopram every morning.", home=home)
    cortex("--now", "-1d", "send", "webchat", "My doctor put me on cetirizine instead.", home=home)
    cortex("--now", "-1d", "send", "webchat", "I switched to oat cortados these days.", home=home)
    cortex("run", home=home)

    def first_of(question: str, newer: str, older: str) -> None:
        hits = _json(cortex("recall", question, "-k", "5", "--json", home=home))
        texts = [h["text"] for h in hits]
        assert texts.index(newer) < texts.index(older), texts
        assert all("updated_by" not in h for h in hits if h["text"] == older), hits

    first_of(
        "what do I take for my allergies?",
        "My doctor put me on cetirizine instead.",
        "I take loratadine for hay fever.",
    )
    first_of(
        "what's my usual coffee order?",
        "I switched to oat cortados these days.",
        "My usual order is a flat white.",
    )


@pytest.mark.soak
def test_news_of_family_and_friends_is_theirs_and_a_correction_is_answered_first(tmp_path):
    """ "My parents just moved to Malaga" is the parents' news: "where do I live?" still answers
    Edinburgh, unmarked, and the parents' old home is what it updates. A chat-style change with no
    "I" ("Bought a Tesla …, sold the Fiesta") is the user's own. Corrections rarely say "I"
    ("Oops, correction: …, not 5pm", "Sorry, I meant Sunday …", "Actually mum's birthday is …"):
    each supersedes what it corrects. One batch, as a connector drops it."""
    now = datetime.now(UTC)
    said = [
        (20 * 24, "I live in Edinburgh, near the Meadows."),
        (20 * 24, "I work at Fernwood Analytics."),
        (20 * 24, "My car is an old Ford Fiesta."),
        (20 * 24, "My parents live in Leeds."),
        (3 * 24, "My parents just moved to Malaga for their retirement."),
        (3 * 24, "My best friend Jess started a new job at Google."),
        (3 * 24, "Bought a Tesla Model 3 on Saturday, sold the Fiesta."),
        (2, "My flight to Rome is at 5pm on Friday."),
        (2, "Dinner with the Hendersons is on Saturday at 8."),
        (2, "My mum's birthday is March 3rd."),
        (2, "Oops, correction: the Rome flight is at 7pm, not 5pm."),
        (2, "Sorry, I meant Sunday for the Hendersons dinner."),
        (2, "Actually mum's birthday is March 13th, I always mix it up."),
    ]
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        "".join(
            json.dumps(
                {
                    "channel": "webchat",
                    "sender": "maya",
                    "text": text,
                    "timestamp": (now - timedelta(hours=hours, minutes=len(said) - n)).isoformat(),
                }
            )
            + "\n"
            for n, (hours, text) in enumerate(said)
        )
    )
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("ingest", str(batch), home=home)
    cortex("run", home=home)

    def hits(question: str) -> list[dict]:
        return _json(cortex("recall", question, "-k", "5", "--json", home=home))

    home_hits = hits("where do I live?")
    edinburgh = next(h for h in home_hits if "Edinburgh" in h["text"])
    assert "updated_by" not in edinburgh, home_hits
    assert not any("updated_by" in h for h in hits("where do I work?") if "Fernwood" in h["text"])
    parents = hits("where do my parents live?")
    assert "Malaga" in parents[0]["text"], parents
    assert any("Leeds" in h["text"] and "updated_by" in h for h in parents), parents
    car = [h["text"] for h in hits("what car do I drive?")]
    assert car.index("Bought a Tesla Model 3 on Saturday, sold the Fiesta.") < car.index(
        "My car is an old Ford Fiesta."
    ), car
    for question, current in (
        ("What time do I fly to Rome?", "7pm"),
        ("When is dinner with the Hendersons?", "Sunday"),
        ("When's my mother's birthday?", "March 13th"),
    ):
        found = hits(question)
        assert current in found[0]["text"], (question, found)
        assert any("updated_by" in h for h in found[1:]), (question, found)


def test_a_change_found_by_the_same_question_updates_only_what_it_is_close_to():
    """The query-time check (real embedder): a newer change goes ahead of an earlier statement the
    question also found only when the two are close in meaning: "I take the car to the garage on
    Mill Lane now" is a change, found beside the hay fever tablets, and updates nothing; the
    owner's change never updates a stranger's words, nor an earlier statement ranked below it."""
    config = RecallConfig()
    owner = lambda channel, sender: sender == "user"  # noqa: E731
    encode = embedder_for(load_settings()).encode

    @dataclass
    class Ranked(Found):
        at: datetime | None = None

    def pairs(*hits: Ranked, question: str = "") -> list[tuple[str, str]]:
        found = co_recalled_updates(
            list(hits),
            config.co_recalled_update_window,
            owner,
            encode,
            config.co_recalled_update_min_cosine,
            config.co_recalled_update_same_attribute_min_cosine,
            attributes_of(question),
            config.co_recalled_update_asked_attribute_min_cosine,
        )
        return [(new.text, old.text) for new, old in found]

    loratadine = Ranked("I take loratadine for hay fever.", [1], at=datetime(2026, 1, 5))
    garage = Ranked(
        "I take the car to the independent garage on Mill Lane now.", [2], at=datetime(2026, 3, 1)
    )
    cetirizine = Ranked("My doctor put me on cetirizine instead.", [3], at=datetime(2026, 5, 5))
    assert pairs(loratadine, garage, cetirizine) == [(cetirizine.text, loratadine.text)]
    assert pairs(loratadine, garage) == []
    assert pairs(cetirizine, loratadine) == []  # already first
    stranger = Ranked(loratadine.text, [1], sender="stranger", at=loratadine.at)
    assert pairs(stranger, cetirizine) == []
    # Too far apart in meaning on their own; a question naming what both are about joins them,
    # and one about something else does not.
    flat_white = Ranked("My usual order is a flat white.", [4], at=datetime(2026, 1, 5))
    cortados = Ranked("I switched to oat cortados these days.", [5], at=datetime(2026, 5, 5))
    assert pairs(flat_white, cortados) == []
    assert pairs(flat_white, cortados, question="what's my usual coffee order?") == [
        (cortados.text, flat_white.text)
    ]
    assert pairs(flat_white, cortados, question="where do I live?") == []


def _days_ago(days: int) -> str:
    """Recent enough that a fact drawn from it is hot, as the extraction model is shown only those."""
    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT09:00:00Z")


def _say(settings, db, text: str, external_id: str, **extra) -> None:
    """One owner message through the inbox (its file named after its id) and a drain of the
    offline brain: the live path, nothing materialized."""
    drop(settings, "webchat", f"{external_id}.json", msg("webchat", text, external_id, **extra))
    ingest_inbox(settings, db)
    Brain(db, settings, OfflineClient()).drain()


def _extraction_with_a_model(settings, messages_server):
    """What `extract_new_facts` takes for extraction by a model: the real SDK against the local
    Messages server."""
    llm = AnthropicClient("claude-haiku-test", "k", messages_server.url, 10, 0)
    return vector_store(settings.paths.lance), embedder_for(settings), llm


def test_a_fact_the_extraction_model_says_is_replaced_leaves_the_floor_and_ranks_second(
    settings, db, messages_server
):
    """With a model (the real SDK against the local Messages server), extraction returns updates:
    the prompt asks for `supersedes`, which names a known fact by its [F…] id; an id it was not
    shown is ignored. The newer statement names no change, so only the model can tell it is one."""
    _say(settings, db, "I bank with Barclays.", "bank-0", timestamp=_days_ago(5))
    vectors, embedder, llm = _extraction_with_a_model(settings, messages_server)
    messages_server.script(
        text_reply('[{"text": "The user banks with Barclays.", "category": "fact", "source_ids": [1]}]')
    )
    old_id = extract_new_facts(db, vectors, embedder, settings, llm).new[0]

    _say(settings, db, "Monzo has all my accounts.", "bank-1", timestamp=_days_ago(2))
    new_turn = db.query("SELECT max(id) FROM session WHERE role = 'user'")[0][0]
    reply = json.dumps(
        [
            {
                "text": "The user banks with Monzo.",
                "category": "fact",
                "source_ids": [new_turn],
                "supersedes": [old_id, 999],
            }
        ]
    )
    messages_server.script(text_reply(reply))
    extract_new_facts(db, vectors, embedder, settings, llm)
    asked = messages_server.requests[1]
    assert "supersedes" in json.dumps(asked["system"])
    assert f"[F{old_id}] The user banks with Barclays." in asked["messages"][0]["content"]

    assert db.query("SELECT valid_to IS NOT NULL FROM facts WHERE id = ?", [old_id]) == [(True,)]
    floor = [f["text"] for f in db.run(hot_for_floor, 50)]
    assert "The user banks with Barclays." not in floor and "The user banks with Monzo." in floor
    hits = recall(db, settings, "which bank am I with", k=4)
    assert "Monzo" in hits[0].text, [h.text for h in hits]
    assert any("Barclays" in h.text and h.updated_by for h in hits), [h.text for h in hits]


@pytest.mark.parametrize(
    ("text", "announces"),
    [
        ("I moved to Porto last week, the new flat is lovely.", True),
        ("New number: 0151 555 0784.", True),
        ("We've made Da Mimmo our new pizza spot.", True),
        ("Ich wohne jetzt in Hamburg.", True),
        ("We need a new shower curtain.", False),  # "a new" thing is not a change of what was true
        ("Kenji says Osaka is unbearably humid right now.", False),
        ("back now", False),  # small talk: nothing left once the change word is out
        ("Switched to a Galaxy S24 yesterday.", True),  # chat leaves the "I" out
        ("Urgent: the client moved the call to 3pm today, please remember that.", False),  # news, not me
        ("So the Helios usability testing is now fully covered.", False),
        ("I've had asthma since I was a kid.", False),
        ("Did you switch my bank to Monzo now?", False),  # a question states nothing
        ("I've found a better barber, Sam on Church Street.", True),
        ("Anna moved to Bristol for a hospital job.", True),  # someone the user told about, by name
        ("Tom's at Spotify now, he left his old job.", True),  # where someone is, said to be new
        ("Paris is in chaos now with the strikes.", False),  # a place is nobody: no "he" or "she"
        ("Just moved to Leeds, the new flat is great.", True),  # "Just" opens the sentence, it is nobody
        ("It's raining now, ugh.", False),  # "It" is nobody
        ("We went with Admiral when the policy renewed.", True),  # a choice made in place of another
        # the everyday ways of saying a state ended or began
        ("I gave up meat last month.", True),
        ("I transferred to the Manchester office.", True),
        ("We broke up, I'm single again.", True),
        ("I'm vegan since January.", True),
        ("Lately I take the train to work.", True),
        ("I'm on a different inhaler, Symbicort.", True),
        ("Our daughter goes to St Anne's this year.", True),
        # a span of time after "been" is how long something held, not when it changed
        ("My therapist is Dr. Kahnwald; she's been a huge help this year.", False),
        ("I've been to Rome twice this month with the kids.", False),
        ("I've been vegan since May, it's going well.", True),  # "since" starts the span
        ("This year I've been cycling to the office.", True),
        # corrections, and chat that leaves the "I" out
        ("Oops, correction: the Rome flight is at 7pm, not 5pm.", True),
        ("Actually mum's birthday is March 13th.", True),
        ("Got an iPhone 15 yesterday, finally ditched the Pixel.", True),
        ("Is it Tuesday, not Monday?", False),
        ("I stopped by the bakery for croissants.", True),  # flagged; only closeness links it
        ("This is the best pasta I've had.", False),  # "this" without a span of time
    ],
)
def test_which_statements_announce_a_change(text, announces):
    assert announces_change(text) is announces


def test_duckdb_finds_every_statement_naming_an_attribute():
    """The attribute scan runs in DuckDB (RE2, no lookaround): each attribute's regex must compile
    there and match at least every text `attributes_of` says names it (a bad one would fail the
    message being answered)."""
    texts = [p[key] for p in load_updates() for key in ("old", "new")]
    texts += [d["text"] for d in load_distractors()] + ["Ich wohne jetzt in Hamburg.", "Mein Hausarzt"]
    attributes = sorted({a for a, _ in ATTRIBUTES})
    with duckdb.connect() as con:
        for attribute in attributes:
            pattern = naming_any(frozenset({attribute}))
            matched = {
                t
                for (t,) in con.execute(
                    "SELECT t FROM unnest(?::VARCHAR[]) AS u(t) WHERE regexp_matches(t, ?, 'i')",
                    [texts, pattern],
                ).fetchall()
            }
            named = {t for t in texts if attribute in attributes_of(t)}
            assert named, attribute  # the sample names every attribute at least once
            assert named <= matched, (attribute, named - matched)


@pytest.mark.parametrize(
    ("text", "person"),
    [
        ("My parents just moved to Malaga for their retirement.", "parents"),
        ("My best friend Jess started a new job at Google.", "Jess"),
        ("Our neighbours switched to a new dentist, Dr. Reyes.", "neighbours"),
        ("Anna moved to Bristol for a hospital job.", "Anna"),
        ("My wife and I moved to Porto last week.", None),  # the user is in it
        ("My doctor put me on cetirizine instead.", None),
        ("I moved to Porto last week.", None),
        ("My sister lives in York.", None),  # no change: nobody's news
    ],
)
def test_whose_change_a_statement_tells(text, person):
    assert changed_person(text) == person


def test_the_subject_leaves_out_the_change_words():
    assert (
        subject_of("Honestly, I've switched allegiance to Brentford.")
        == "Honestly, I've allegiance to Brentford."
    )


def test_successor_chains_resolve_to_the_newest_and_survive_a_cycle():
    at = datetime(2026, 1, 1)
    links = [
        (1, 2, "Porto", "webchat", "user", at),
        (2, 3, "Berlin", "webchat", "user", at),
        (3, 2, "Porto", "webchat", "user", at),
    ]
    newest = newest_successors(links)
    assert (newest[1].session_id, newest[1].text) in ((2, "Porto"), (3, "Berlin"))
    assert newest_successors(links[:2])[1].text == "Berlin"


def test_a_fact_with_one_updated_source_of_two_stays_current(db):
    """A fact is closed only when every statement it came from was updated."""

    def setup(con):
        for sid, text in ((1, "I live in Lisbon."), (2, "Lisbon is home."), (3, "I moved to Porto.")):
            con.execute(
                "INSERT INTO session (id, role, channel, sender, content, ts) VALUES (?, 'user', 'webchat', "
                "'user', ?, ?)",
                [sid, text, datetime(2026, 1, sid)],
            )
        con.execute(
            "INSERT INTO facts (id, text, norm_hash, category, importance, sources, channels, origin, "
            "stated_at, created_at, updated_at) VALUES (1, 'Lives in Lisbon', 'h', 'identity', 3, [1, 2], "
            "['webchat'], 'extraction', now(), now(), now())"
        )
        updates.record(con, 1, 3, 0.5)
        first = updates.close_facts(con, updates.outdated_candidates(con))
        updates.record(con, 2, 3, 0.5)
        return first, updates.close_facts(con, updates.outdated_candidates(con))

    assert db.run(setup) == ([], [1])
    # linked to this statement already (its message processed again) counts as linked; to another, not
    assert db.run(updates.record, 1, 3, 0.5) and not db.run(updates.record, 1, 2, 0.5)


def test_a_delegated_result_or_a_strangers_turn_is_never_superseded():
    """Only the owner's own statements can be updated: not a router result, not someone else's words."""

    found = [
        Found("Result: Atelier Ribeira, 10-day pack 140 EUR.", [3], "router", "router"),
        Found("Atelier Ribeira sounds right for me.", [4], "telegram", "stranger"),
    ]
    owner = lambda channel, sender: sender in ("user", "router")  # noqa: E731
    encode = embedder_for(load_settings()).encode
    said = "I'm taking the 10-day pack at Atelier Ribeira now."
    assert superseded_statement(said, 9, found, owner, encode, 0.1, 0.1) is None
    found.append(Found("Atelier Ribeira sounds right, I'll go see it on Friday.", [5], "webchat", "user"))
    assert superseded_statement(said, 9, found, owner, encode, 0.1, 0.1)[0] == [5]


@pytest.mark.slow
def test_a_new_bank_and_a_promotion_are_current_in_recall_and_the_bulletin(tmp_path):
    """Issue 14's update set through the CLI: "I bank with Barclays", later "I moved all my accounts
    to Monzo" (the same attribute in other words, only 0.34 close in meaning), and "I'm a junior
    developer", later "I got promoted to senior engineer!". Recall answers Monzo first and keeps
    Barclays as history; the bulletin states the promotion, which no capture pattern knows, in
    place of the outdated role."""
    home = tmp_path / "home"
    cortex("init", home=home)
    for said in ("I bank with Barclays.", "I'm a junior developer."):
        cortex("--now", "-40d", "send", "webchat", said, home=home)
    for said in ("I moved all my accounts to Monzo.", "I got promoted to senior engineer!"):
        cortex("--now", "-1d", "send", "webchat", said, home=home)
    cortex("run", home=home)

    hits = _json(cortex("recall", "which bank am I with?", "-k", "5", "--json", home=home))
    assert "Monzo" in hits[0]["text"], hits
    barclays = next(h for h in hits if "Barclays" in h["text"])  # history stays queryable
    assert barclays["updated_by"] in hits[0]["sources"]
    bulletin = (home / "out" / "memory_bulletin.md").read_text()
    assert "senior engineer" in bulletin and "junior" not in bulletin, bulletin


def test_an_update_supersedes_the_statement_about_the_same_attribute_and_nothing_else():
    """Thresholds of the default preset: a shared attribute ("bank", "accounts") is enough at a low
    cosine; statements that merely look alike (two car makes, two doors) update nothing; a change
    told of someone by name updates only what was said about them."""
    config = RecallConfig()
    owner = lambda channel, sender: sender == "user"  # noqa: E731
    encode = embedder_for(load_settings()).encode

    def superseded(said: str, *earlier: str) -> list[int] | None:
        found = [Found(text, [n]) for n, text in enumerate(earlier, 1)]
        old = superseded_statement(
            said, 9, found, owner, encode, config.update_min_cosine, config.update_same_attribute_min_cosine
        )
        return old and old[0]

    assert superseded("I moved all my accounts to Monzo.", "I support Arsenal.", "I bank with Barclays.") == [
        2
    ]
    assert (
        superseded("Today was my first day at BMW.", "Sold the old car, I've got a Tesla Model 3 now.")
        is None
    )
    assert superseded("on my way out the door now", "brb, someone's at the door") is None
    # a correction's opening word says nothing of what it is about (0.196 with it, under 0.2)
    leeds = "I live in Leeds and work at Arup as a structural engineer."
    assert superseded("Actually I moved to York last month.", leeds) == [1]
    assert superseded(
        "Anna moved to Bristol for a hospital job.", "I live in Lisbon.", "My sister Anna lives in Leeds."
    ) == [2]
    assert superseded("Anna moved to Bristol for a hospital job.", "I live in Lisbon.") is None
    # News of someone else, told by name, is theirs: the user's own change never supersedes it.
    assert superseded("Tom's at Spotify now, he left his old job.", "My brother Tom works at Google.") == [1]
    assert (
        superseded(
            "Priya left the company, I report to Daniel now.", "Tom's at Spotify now, he left his old job."
        )
        is None
    )
    # ... but a change the user told without "I" is theirs, however the sentence opens.
    oat = "Recently switched to oat milk for the coffee."
    assert superseded("I switched to almond milk for the coffee.", oat) == [1]


def test_a_statement_that_updated_a_fact_is_a_fact_of_its_kind():
    """Offline extraction: "I got promoted to senior engineer!" matches no capture pattern, but it
    replaced an identity fact, so it is the current identity fact."""
    at = datetime(2026, 5, 1)
    turn = Turn(7, "user", "webchat", "user", "I got promoted to senior engineer!", at)
    assert extract_offline([turn], InjectedText([])) == []
    (draft,) = extract_offline([turn], InjectedText([]), {7: ([3], "identity", 3)})
    assert (draft.text, draft.category, draft.importance, draft.sources) == (
        turn.content,
        "identity",
        3,
        (7,),
    )


@pytest.mark.soak
@pytest.mark.slow
def test_a_plan_or_a_person_the_user_told_about_is_answered_with_its_latest_state(tmp_path):
    """A change of something or someone else the user tells about supersedes what they had said of
    it ("The Ghent trip got moved to the 19th" had left "the 12th" answered first), a plan moved to
    another time supersedes the user's own telling of it ("I'm flying to Tokyo on the 14th"), and a change
    that adds to it, or is about something else, supersedes nothing (QA, helper-37)."""
    home = tmp_path / "home"
    cortex("init", home=home)
    said = [
        ("-14d", "The Ghent trip is on the 12th of May."),
        ("-14d", "I'm flying to Tokyo on the 14th for a conference."),
        ("-14d", "Imogen runs the bike shop on Quay Street."),
        ("-13d", "Tobias charges 40 euros an hour for piano lessons."),
        ("-2d", "The Ghent trip got moved to the 19th."),
        ("-2d", "The Tokyo trip got moved to the 21st."),
        ("-2d", "Imogen now does repairs as well."),
        ("-1d", "Tobias charges 55 euros an hour now."),
    ]
    for when, text in said:
        cortex("--now", when, "send", "webchat", text, home=home)
    cortex("send", "webchat", "when is the Ghent trip?", home=home)
    cortex("run", home=home)
    replies = {r["reply_to"]: r["text"] for r in _json(cortex("outbox", "--json", home=home))}
    trip = replies[max(replies)]
    assert trip.index("19th") < trip.index("12th"), trip
    first = _json(cortex("recall", "when is the Ghent trip", "-k", "3", "--json", home=home))[0]
    assert "19th" in first["text"], first
    # a plan the user told in the first person, moved in other words: the 14th had stayed first
    tokyo = _json(cortex("recall", "When do I fly to Tokyo?", "-k", "3", "--json", home=home))
    assert "21st" in tokyo[0]["text"], tokyo
    assert any("14th" in h["text"] and h.get("updated_by") for h in tokyo), tokyo
    rate = _json(cortex("recall", "how much are Tobias's piano lessons", "-k", "3", "--json", home=home))
    assert "55" in rate[0]["text"] and any("40" in h["text"] and h.get("updated_by") for h in rate), rate
    shop = _json(cortex("recall", "what does Imogen run", "-k", "3", "--json", home=home))
    bike = next(h for h in shop if "bike shop" in h["text"])
    assert "updated_by" not in bike, shop  # "as well" adds a trade; she still runs the shop


@pytest.mark.parametrize(
    ("text", "subject"),
    [
        ("The Ghent trip got moved to the 19th.", {"ghent", "trip"}),
        ("Tobias charges 55 euros an hour now.", {"tobias"}),
        ("Tobias's rate is 55 now.", {"tobias", "rate"}),
        ("The launch party has been pushed back to April.", {"launch", "party"}),
        ("Dr Mensah no longer works Mondays.", {"mensah"}),  # a title names nobody alone
        ("Imogen now does repairs as well.", set()),  # adds, replaces nothing
        ("It's raining now, ugh.", set()),  # a pronoun opens no subject
        ("I moved to Porto last week.", set()),  # the user's own change: announces_change's
        ("The Ghent trip is on the 12th of May.", set()),  # no change said
        ("Kenji says Osaka is unbearably humid right now.", set()),  # "right now" is no change
        ("when did the Ghent trip get moved?", set()),  # a question states nothing
    ],
)
def test_what_a_change_of_someone_or_something_else_is_about(text, subject):
    assert changed_subject(text).words == subject


@pytest.mark.parametrize(
    ("change", "earlier", "same"),
    [
        ("Paris is in chaos now.", "Paris is lovely in spring.", True),
        ("Paris is in chaos now.", "I work in Paris.", False),  # not what that one is about
        ("Uncle Farid's café is now a bookshop.", "My uncle Farid runs a café in Leeds.", True),
        ("Dr Osei no longer works Mondays.", "Dr Mensah is my GP.", False),  # a title names nobody
        ("The Elm Street pharmacy closes at 8 now.", "The pharmacy on Elm Street closes at 6.", True),
        # review (helper-53): news of a thing or of someone else is not of the user's own
        ("Tom's phone number changed, it is 0176 5551234 now.", "My phone number is 0151 4443322.", False),
        (
            "The dentist appointment for the kids got moved to Friday.",
            "My dentist appointment is on Tuesday.",
            False,
        ),
        ("Sam's birthday party got moved to Sunday.", "My birthday party is on Saturday the 12th.", False),
        ("The gym changed its opening hours, now 6 to 10.", "My gym is the FitX on Leopoldstrasse.", False),
        ("The wifi password changed to sunflower42.", "My wifi password is bluebird77.", False),
        ("The bank changed its fees this year.", "My bank is Monzo.", False),
    ],
)
def test_an_earlier_statement_must_open_with_the_changed_subject(change, earlier, same):
    assert same_subject(changed_subject(change), earlier) is same


@pytest.mark.parametrize(
    ("change", "earlier", "moved"),
    [
        ("The Tokyo trip got moved to the 21st.", "I'm flying to Tokyo on the 14th for a conference.", True),
        ("The Lisbon flight got pushed back to Saturday.", "We fly to Lisbon on Friday morning.", True),
        ("The Oslo visit is postponed until March.", "We're visiting Oslo in February.", True),
        ("The Tokyo office moved to Shibuya.", "I'm flying to Tokyo on the 14th.", False),  # no new time
        ("The Lisbon flight got moved to Saturday.", "We may fly to Lisbon one day.", False),  # no time told
        ("Sam's party got moved to Sunday.", "I'm having a party on Saturday the 12th.", False),  # not Sam's
        ("The kids' dentist appointment got moved to Friday.", "I see the dentist on Tuesday.", False),
        ("The Tokyo trip got moved to the 21st.", "Kenji flies to Tokyo on the 14th.", False),  # Kenji's
    ],
)
def test_a_plan_moved_to_another_time_is_of_the_users_own_telling_of_it(change, earlier, moved):
    assert moves_plan_of(changed_subject(change), change, earlier) is moved


@pytest.mark.soak
@pytest.mark.slow
def test_news_of_someone_or_something_else_never_supersedes_the_users_own(tmp_path):
    """Through the CLI (review, helper-53): Tom's new number had superseded "My phone number is …",
    and the kids' dentist appointment the user's own."""
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("--now", "-3d", "send", "webchat", "My phone number is 0151 4443322", home=home)
    cortex("--now", "-3d", "send", "webchat", "My dentist appointment is on Tuesday at 9", home=home)
    cortex("--now", "-3d", "run", home=home)
    cortex("send", "webchat", "Tom's phone number changed, it is 0176 5551234 now", home=home)
    cortex("send", "webchat", "The dentist appointment for the kids got moved to Friday", home=home)
    cortex("run", home=home)
    for asked, mine in (("what is my phone number", "0151"), ("when is my dentist appointment", "Tuesday")):
        hits = _json(cortex("recall", asked, "-k", "5", "--json", home=home))
        own = [h for h in hits if mine in h["text"]]
        assert own and not any(h.get("updated_by") for h in own), hits


def test_an_update_closes_only_the_fact_of_its_statement_it_is_about(settings, db, messages_server):
    """The model drew two facts from "I live in Lisbon and I work at Acme as a nurse", and "I moved
    to Porto" closed both, so "where do I work?" was answered with a fact marked no longer current."""
    _say(settings, db, "I live in Lisbon and I work at Acme as a nurse.", "both-0", timestamp=_days_ago(5))
    vectors, embedder, llm = _extraction_with_a_model(settings, messages_server)
    drawn = [
        {"text": "The user lives in Lisbon.", "category": "identity", "source_ids": [1]},
        {"text": "The user works at Acme as a nurse.", "category": "identity", "source_ids": [1]},
    ]
    messages_server.script(text_reply(json.dumps(drawn)))
    home, job = extract_new_facts(db, vectors, embedder, settings, llm).new

    _say(settings, db, "I moved to Porto last week.", "move-0", timestamp=_days_ago(1))
    current = dict(db.query("SELECT id, valid_to IS NULL FROM facts WHERE id IN (?, ?)", [home, job]))
    assert current == {home: False, job: True}
    work = recall(db, settings, "where do I work", k=3)
    assert "Acme" in work[0].text and work[0].updated_by is None, [(h.text, h.updated_by) for h in work]
    # a later extraction leaves it so
    messages_server.script(text_reply("[]"))
    extract_new_facts(db, vectors, embedder, settings, llm)
    assert db.query("SELECT valid_to IS NULL FROM facts WHERE id = ?", [job]) == [(True,)]

    # and a change of job, the statement updated once already, closes it
    _say(settings, db, "I work at the Beta Clinic now.", "job-1")
    assert db.query("SELECT valid_to IS NULL FROM facts WHERE id = ?", [job]) == [(False,)]
    work = recall(db, settings, "where do I work", k=3)
    assert "Beta" in work[0].text, [(h.text, h.updated_by) for h in work]

    # an erased change no longer stands: the move's erasure reopens Lisbon alone (Beta closed Acme
    # itself), and Beta's then reopens Acme
    cortex("erase", "--matching", "moved to Porto", "--yes", home=settings.home)
    current = dict(db.query("SELECT id, valid_to IS NULL FROM facts WHERE id IN (?, ?)", [home, job]))
    assert current == {home: True, job: False}
    cortex("erase", "--matching", "Beta Clinic", "--yes", home=settings.home)
    current = dict(db.query("SELECT id, valid_to IS NULL FROM facts WHERE id IN (?, ?)", [home, job]))
    assert current == {home: True, job: True}


def test_a_fact_closed_by_an_expired_statement_stays_closed_through_a_later_erase(settings, db):
    """Turn retention deletes old turns and keeps their facts and update links; the next `cortex
    erase`, of anything, took a fact whose closing statement had expired for one whose update was
    erased, and "I live in Lisbon" was current again beside the move."""
    said = [("I live in Lisbon.", _days_ago(50)), ("I moved to Porto.", _days_ago(45))]
    _drain(settings, db, [*said, ("Remind me to buy oat milk.", _days_ago(1))])
    extract_new_facts(db, vector_store(settings.paths.lance), embedder_for(settings), settings, None)
    closed = "SELECT valid_to IS NOT NULL FROM facts WHERE text LIKE '%Lisbon%'"
    assert db.query(closed) == [(True,)]
    cortex("erase", "--expired", "--yes", home=settings.home, env={"CORTEX_TURN_TTL_DAYS": "30"})
    assert not db.query("SELECT id FROM session WHERE content LIKE '%Porto%'")  # expired
    cortex("erase", "--matching", "oat milk", "--yes", home=settings.home)
    assert db.query(closed) == [(True,)]
