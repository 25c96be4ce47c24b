"""How recall ranks memories, as one frozen value: benchmarks compare presets instead of editing
constants, and an instance picks one by name (`CORTEX_RECALL_PRESET`).

Every value below was measured on the tuning halves only (bench/paraphrase.py `--split tune`,
bench/locomo.py `--split tune`); the check halves report the result.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RecallConfig:
    # Reciprocal rank fusion: each result list adds weight / (rrf_k + rank).
    rrf_k: int = 60
    # Below this cosine a vector hit is noise, not memory (seed 002's minMatchScore). With
    # all-MiniLM-L6-v2 a first-person statement and a question about it that shares no word score
    # 0.15-0.55 ("How should people reach me?" / "Voice calls stress me out, so send me a WhatsApp
    # instead.": 0.24); 0.3 dropped a third of them. Per model, from the paraphrase tune half: 0.2 is
    # about the 90th percentile of a question's cosine to the other items' statements (unrelated):
    # 0.194 for all-MiniLM-L6-v2, 0.177 for all-mpnet-base-v2, so it holds for both.
    min_cosine: float = 0.2
    fts_weight: float = 1.0
    vector_weight: float = 1.0
    # A full-text hit counts in proportion to the share of the query's words it says: a turn that
    # shares only "out" or "room" with the question is weak evidence.
    fts_coverage: bool = True
    # A vector hit counts in proportion to how far its cosine rises above `min_cosine`, against the
    # best hit's: by rank alone a turn at 0.22 weighed as much as one at 0.45 when few turns exist.
    vector_closeness: bool = True
    # A turn next to a strong hit shares its topic (the answer to a matched question): it gains this
    # share of its best neighbour's fused score. Only across speakers when `neighbours_in_dialogue`:
    # the user's previous message to the agent is usually about something else.
    neighbour_share: float = 0.5
    neighbours_in_dialogue: bool = True
    # A query naming a day or a month prefers what was said then.
    date_boost: float = 2.0
    # A query naming a past day from today ("what did I tell you yesterday?") adds the owner's
    # statements of that day as one more ranked list (newest first) with this weight; one asking
    # what is known about the owner ("what do you know about me?") adds the most important facts
    # and the owner's newest statements. Such a question shares no word and no meaning with what
    # it asks for, and found none of it before.
    listing_weight: float = 1.0
    # Each turn gains this share of the top `session_top` scores of its conversation (channel, day).
    session_share: float = 0.35
    session_top: int = 3
    # A fact from at most this many turns is one memory with them.
    merge_max_sources: int = 2
    # Pseudo-relevance feedback: words shared by the best turns widen a second full-text search.
    feedback_docs: int = 10
    feedback_terms: int = 12
    feedback_weight: float = 0.5
    # Turns said since the last episodic indexing run that recall reads from DuckDB.
    tail_turns: int = 2000
    # Knowledge updates (memory/updates.py): a statement announcing a change supersedes the earlier
    # owner statement recall finds for it when their cosine reaches `update_min_cosine`, or
    # `update_same_attribute_min_cosine` when both name the same attribute ("bank", "accounts");
    # the superseded memory keeps `outdated_weight` of its score, just behind its successor. On the
    # update set's tune half, true pairs sharing an attribute scored 0.33-0.68, the best false one
    # 0.36 (with a "school" that meant "friend since school", since excluded); true pairs sharing
    # none scored 0.54-0.66, false ones up to 0.49 (small talk: "on my way out the door now" /
    # "brb, someone's at the door", 0.44 with "I just got home").
    # Besides the `update_candidates` recall finds, the `update_attribute_candidates` latest earlier
    # statements naming an attribute the change names are compared: "We went with Admiral when the
    # policy renewed" shares no word with "Our car insurance is with Aviva" (0.24), and its search
    # found five others. With them, at 0.2 for a shared attribute (0.3 before), the tune half's
    # true links went 27 -> 31 with the same 2 false ones, and current-value-first 75.0/80.6/80.6 ->
    # 80.6/88.9/86.1 (reply/live/settled); the check half stayed 69.4/72.2/72.2.
    update_min_cosine: float = 0.5
    update_same_attribute_min_cosine: float = 0.2
    update_candidates: int = 5
    # A change of someone or something else the user tells about ("The launch has been pushed back
    # to April") supersedes an earlier statement opening with the same subject ("The product launch
    # is set for the 4th of March") at this cosine; at query time, so may a later statement that says
    # no change ("Rui's lessons are 45 euros an hour"), within `co_recalled_update_window`. None: off.
    # bench/data/updates_others.jsonl tune half, current-value-first on replaced values 80 -> 95
    # (0.4-0.6 alike, 0.7: 90), kept values 100, no false link once "as well" adds (memory/updates.py).
    update_same_subject_min_cosine: float | None = 0.5
    update_attribute_candidates: int = 20
    # Of the facts one updated statement yielded ("I live in Lisbon and work at Acme as a nurse":
    # lives in Lisbon, works at Acme), those whose cosine to the change's subject is within this of
    # the nearest are outdated; the others stay current. Not measured on the update sets: their
    # statements yield one fact each offline. Set from tests/integration/memory/test_updates.py's
    # examples (the fact the change is about: 0.3-0.5; another of the statement: under 0.2).
    update_fact_margin: float = 0.1
    # The same check at query time, for a change and an earlier statement one question found both
    # of in its top `co_recalled_update_window`: the shared question is evidence the write-time
    # search lacked. Only their order changes (memory/recall.py `_changes_first`).
    co_recalled_update_window: int = 5
    co_recalled_update_min_cosine: float = 0.35
    co_recalled_update_same_attribute_min_cosine: float = 0.2
    # When the question names an attribute both name ("what's my usual coffee order?": "My usual order
    # is a flat white", "I switched to oat cortados these days", 0.16 apart), the question says what
    # they share, and any closeness will do. Update set tune half: current-value-first
    # 80.6/88.9/86.1 -> 83.3/91.7/86.1 (reply/live/settled), check half 69.4/72.2/72.2 unchanged;
    # the paraphrase set unchanged on both halves.
    co_recalled_update_asked_attribute_min_cosine: float = 0.0
    outdated_weight: float = 0.8
    # A question about the owner ("where do I live?") is about the owner: another sender's turn ("I
    # live in Paris", said in a group chat) keeps this share of its score, and so do the turns its
    # conversation lifts. At full weight strangers' lines took a 300-turn history's top 7 (QA, helper-38).
    # The benchmarks have no strangers: each speaker there is an owner.
    stranger_weight: float = 0.5

    def with_(self, **changes) -> RecallConfig:
        return replace(self, **changes)


# Tuned on the whole LoCoMo development split (two people talking about their lives) before the
# paraphrase set existed: R@10 80.2 there, 14% settled on the paraphrase check half. Kept to compare.
CONVERSATION = RecallConfig(
    min_cosine=0.3,
    vector_weight=0.5,
    fts_coverage=False,
    vector_closeness=False,
    neighbours_in_dialogue=False,
)

PRESETS: dict[str, RecallConfig] = {
    "default": RecallConfig(),
    "conversation": CONVERSATION,
}


def preset(name: str) -> RecallConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown recall preset {name!r}; one of {', '.join(PRESETS)}") from None
