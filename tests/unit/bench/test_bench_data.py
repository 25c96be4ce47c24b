"""The paraphrase and update sets are what bench.paraphrase scores against: a set that leaks a word from
statement to question, or an answer term that other turns also say, would measure nothing."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.paraphrase import CATEGORIES, SPLITS, load_distractors, load_items, load_updates, stems
from cortex_pipelines.text import with_compound_words

REQUIRED = {"preferences", "health", "people", "places", "possessions", "schedules"}
ITEM_KEYS = {"id", "category", "statement", "question", "answer_terms", "split"}
UPDATE_KEYS = {"id", "old", "new", "question", "current_terms", "stale_terms", "gap_days", "split"}
KINDS = {"smalltalk", "own_question", "other_fact", "request"}


def term_stems(terms: list[str]) -> set[str]:
    return {s for t in terms for s in stems(t)}


def assert_balanced(rows: list[dict], group: str | None) -> None:
    by_group = Counter((r[group] if group else "", r["split"]) for r in rows)
    for name in {r[group] if group else "" for r in rows}:
        tune, check = by_group[name, "tune"], by_group[name, "check"]
        assert abs(tune - check) <= 1, f"{name or 'all'}: {tune} tune vs {check} check"


@pytest.fixture(scope="module")
def items() -> list[dict]:
    return load_items()


@pytest.fixture(scope="module")
def distractors() -> list[dict]:
    return load_distractors()


@pytest.fixture(scope="module")
def updates() -> list[dict]:
    return load_updates()


def test_items_schema_and_coverage(items):
    assert len(items) >= 72
    assert len({i["id"] for i in items}) == len(items)
    for item in items:
        assert set(item) == ITEM_KEYS, item["id"]
        assert item["category"] in CATEGORIES and item["split"] in SPLITS, item["id"]
        assert all(isinstance(item[k], str) and item[k].strip() for k in ("statement", "question")), item[
            "id"
        ]
        assert 1 <= len(item["answer_terms"]) <= 3, item["id"]
    counts = Counter(i["category"] for i in items)
    assert all(counts[c] >= 10 for c in REQUIRED), counts
    assert_balanced(items, "category")


def test_questions_share_no_content_word_with_their_statement(items):
    for item in items:
        shared = set(stems(item["statement"])) & set(stems(item["question"]))
        assert not shared, f"{item['id']}: {sorted(shared)}"


def test_answer_terms_identify_their_statement(items, distractors):
    """Each term is said by its statement and by no other turn of the conversation, so a reply or a
    memory that carries it carries this fact."""
    for item in items:
        said = set(stems(item["statement"]))
        for term in item["answer_terms"]:
            assert stems(term) and set(stems(term)) <= said, f"{item['id']}: {term!r}"
    elsewhere = [(f"distractor {d['id']}", d["text"]) for d in distractors]
    for item in items:
        terms = term_stems(item["answer_terms"])
        others = elsewhere + [
            (f"{o['id']} {part}", o[part])
            for o in items
            for part in ("statement", "question")
            if o["id"] != item["id"]
        ]
        for where, text in others:
            assert not terms & set(stems(text)), f"{item['id']}'s terms are also in {where}: {text!r}"


def test_distractors(distractors):
    assert len(distractors) >= 150
    assert len({d["id"] for d in distractors}) == len(distractors)
    assert len({d["text"] for d in distractors}) == len(distractors)
    assert all(set(d) == {"id", "kind", "text"} and d["kind"] in KINDS for d in distractors)
    assert Counter(d["kind"] for d in distractors)["own_question"] >= 20


def test_updates(updates, distractors):
    assert len(updates) >= 24
    assert len({u["id"] for u in updates}) == len(updates)
    for u in updates:
        assert set(u) == UPDATE_KEYS and u["split"] in SPLITS, u["id"]
        assert isinstance(u["gap_days"], int) and u["gap_days"] > 0, u["id"]
        old, new = set(stems(u["old"])), set(stems(u["new"]))
        current, stale = term_stems(u["current_terms"]), term_stems(u["stale_terms"])
        assert current and current <= new and not current & old, u["id"]
        assert stale and stale <= old and not stale & new, u["id"]
    assert_balanced(updates, None)
    texts = [(f"distractor {d['id']}", d["text"]) for d in distractors]
    texts += [(f"{u['id']} {part}", u[part]) for u in updates for part in ("old", "new", "question")]
    for u in updates:
        terms = term_stems(u["current_terms"] + u["stale_terms"])
        for where, text in texts:
            if not where.startswith(f"{u['id']} "):
                assert not terms & set(stems(text)), f"{u['id']}'s terms are also in {where}: {text!r}"


def test_updates_of_others():
    """Changes of people and things the user tells about, and "neg-" pairs whose newer statement
    keeps the older one true: their terms are the older one's, and nothing is stale. A weekday or a
    month may recur in other pairs: the bench counts only hits drawn from the pair's own statements."""
    pairs = load_updates(others=True)
    assert len(pairs) >= 40 and len({p["id"] for p in pairs}) == len(pairs)
    for p in pairs:
        assert set(p) == UPDATE_KEYS and p["split"] in SPLITS, p["id"]
        old, new = set(stems(p["old"])), set(stems(p["new"]))
        current, stale = term_stems(p["current_terms"]), term_stems(p["stale_terms"])
        if p["id"].startswith("neg-"):
            assert current and current <= old and not stale, p["id"]
        else:
            assert current and current <= new and not current & old, p["id"]
            assert stale and stale <= old and not stale & new, p["id"]
    assert_balanced(pairs, None)
    assert_balanced([p for p in pairs if p["id"].startswith("neg-")], None)


def test_compounds_hide_the_only_words_a_question_shares_with_its_statement(distractors):
    """The compounds set: each statement names a thing with capitalised words run together, and its
    question shares no content word with it but one hidden in that name ("Which gym" for
    "PureGym"), so it measures what reading the name's words adds, and nothing else."""
    items = load_items(compounds=True)
    assert len(items) >= 20 and len({i["id"] for i in items}) == len(items)
    for item in items:
        assert set(item) == ITEM_KEYS, item["id"]
        assert item["category"] in CATEGORIES and item["split"] in SPLITS, item["id"]
        names = [w for w in item["statement"].split() if with_compound_words(w) != w]
        assert names, f"{item['id']}: no name written as words run together"
        hidden = {s for name in names for s in stems(with_compound_words(name))}
        shared = set(stems(item["statement"])) & set(stems(item["question"]))
        assert shared <= hidden, f"{item['id']}: {sorted(shared - hidden)}"
        terms = term_stems(item["answer_terms"])
        assert terms <= set(stems(item["statement"])), item["id"]
        others = [d["text"] for d in distractors] + [o["statement"] for o in items if o is not item]
        assert not any(terms & set(stems(text)) for text in others), item["id"]
    assert_balanced(items, None)
