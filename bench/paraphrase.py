"""Personal-assistant paraphrase set: is what the user said earlier found by meaning, on the user's path?

Each item is a first-person statement ("I'm severely allergic to peanuts, so never suggest satay") and
a later question sharing no content word with it ("What foods must I avoid for dinner?"). A fresh
CORTEX_HOME receives every statement interleaved with distractor turns (small talk, other facts, the
user's own questions on the same topics) as inbox files over a few hours, then the questions of the
chosen split, all after every statement (both splits' statements are always told, so a split changes
only which questions are asked). Measured:

live      one `Brain.drain()` with the offline provider answers statements and questions in one batch,
          nothing materialized: does the reply carry the fact (an answer term), and does
          `recall(question, k=5)` return the statement's turn or a fact drawn from it, carrying a term
settled   after the `cortex_main` job (every memory asset): recall@5 again
baseline  over the raw user turns, in the same run: BM25 top-5 and dense top-5 (the instance's
          embedder, cosine); neither may return the question itself
diagnostic how often a question the user asked comes back among the top 5

With --updates, the knowledge-update set instead: an old statement, `gap_days` later the new one, then
the question; a question scores when the first hit (or the first term in the reply) carrying a current
or a stale term carries a current one (current-value-first). With --others, the changes are of
people and things the user tells about ("The Berlin trip got moved to the 19th"), and a few pairs
keep the older statement true ("kept": linking them is a false update). With --compounds, a
paraphrase set of names written as capitalised words run together ("I go to PureGym"), whose
question may use a word hidden in the name ("Which gym am I a member of?") and none other.

    python -m bench.paraphrase --split check --json bench/results/paraphrase.json
    python -m bench.paraphrase --updates --split all      (figures to bench/results/updates-all.json)
    python -m bench.paraphrase --updates --others --split tune
    python -m bench.paraphrase --split tune --recall-preset conversation
    python -m bench.paraphrase --compounds --split check
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.table import Table

from cortex_pipelines.memory.snapshot import tokenize

if TYPE_CHECKING:
    from cortex_pipelines.config import Settings
    from cortex_pipelines.storage import Database

DATA = Path(__file__).parent / "data"
CATEGORIES = ("preferences", "health", "people", "places", "possessions", "schedules", "work")
SPLITS = ("tune", "check")
# The update set's questions: on a value the newer statement replaced, and (updates_others.jsonl's
# "neg-" pairs) on one it kept.
UPDATE_GROUPS = ("updated", "kept")
MSG_ID = re.compile(r"\bmsgs? (\d+(?:, \d+)*)")
K = 5
# A fixed timeline, so a run does not depend on the day it is made; the instance clock is moved to
# its end (CORTEX_NOW as an offset, so it keeps running).
START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
MIN_APART = 2  # distractor turns at least between two statements
SEED = 14


def stems(text: str) -> list[str]:
    """Content words as recall's full text sees them: lower case, stop words dropped, stemmed."""
    return tokenize([text], ids=False)[0]


def carries(text: str, terms: list[str]) -> bool:
    """Whether a text says any of the terms (compared stemmed, so "peanut" carries "peanuts")."""
    said = set(stems(text))
    return any(set(stems(term)) <= said for term in terms)


def first_term(text: str, current: list[str], stale: list[str]) -> str | None:
    """Which kind of term a text says first: "current", "stale" or None."""
    wanted = {s: "current" for t in current for s in stems(t)} | {s: "stale" for t in stale for s in stems(t)}
    return next((wanted[w] for w in stems(text) if w in wanted), None)


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def load_items(compounds: bool = False) -> list[dict]:
    """The paraphrase set, or (`compounds`) the set of names written as words run together."""
    return _jsonl("compounds.jsonl" if compounds else "paraphrase.jsonl")


def load_distractors() -> list[dict]:
    return _jsonl("paraphrase_distractors.jsonl")


def load_updates(others: bool = False) -> list[dict]:
    """The user's own changes, or (`others`) changes of people and things the user tells about."""
    return _jsonl("updates_others.jsonl" if others else "updates.jsonl")


def kept(pair: dict) -> bool:
    """A pair whose newer statement adds to the older one instead of replacing it ("neg-" ids):
    linking the two is a false update, and the question asks for the older one's value."""
    return pair["id"].startswith("neg-")


def chosen(rows: list[dict], split: str) -> list[dict]:
    return [r for r in rows if split == "all" or r["split"] == split]


@dataclass
class Turn:
    key: str  # external id: "s:<item>", "q:<item>", "d:<distractor>", "old:<pair>", "new:<pair>"
    text: str
    at: datetime


@dataclass
class Instance:
    """A fresh CORTEX_HOME that has been told the turns, one inbox file each, and answered them live."""

    settings: Settings
    db: Database
    session: dict[str, int]  # external id -> the user turn's session id
    replies: dict[str, str]  # external id -> the brain's reply
    label: dict[int, str]  # session id -> external id, for every user turn
    timing: dict = field(default_factory=dict)
    # Knowledge updates the brain detected while answering: (older turn, newer turn, cosine) by label.
    links: list[tuple[str, str, float]] = field(default_factory=list)


def paraphrase_turns(items: list[dict], distractors: list[dict], asked: list[dict]) -> list[Turn]:
    """Every statement, at least MIN_APART distractors apart, over a few hours; then the questions."""
    rng = random.Random(SEED)
    statements = [("s:" + i["id"], i["statement"]) for i in items]
    others = [("d:" + d["id"], d["text"]) for d in distractors]
    rng.shuffle(statements)
    rng.shuffle(others)
    gaps = [0] + [MIN_APART] * (len(statements) - 1) + [0]
    for _ in range(len(others) - sum(gaps)):
        gaps[rng.randrange(len(gaps))] += 1
    said: list[tuple[str, str]] = []
    pool = iter(others)
    for n, gap in enumerate(gaps):
        said.extend(next(pool) for _ in range(gap))
        if n < len(statements):
            said.append(statements[n])
    turns, at = [], START
    for key, text in said:
        turns.append(Turn(key, text, at))
        at += timedelta(seconds=rng.randint(30, 90))
    at += timedelta(minutes=20)
    questions = [("q:" + i["id"], i["question"]) for i in asked]
    rng.shuffle(questions)
    for key, text in questions:
        turns.append(Turn(key, text, at))
        at += timedelta(seconds=rng.randint(60, 120))
    return turns


def update_turns(pairs: list[dict], distractors: list[dict], asked: list[dict]) -> list[Turn]:
    """Each old statement gap_days before its new one, a distractor a minute after each; the new ones
    in the last hours; then the questions."""
    end = START + timedelta(days=120)
    fillers = iter(distractors)
    turns = []
    for n, pair in enumerate(pairs):
        new_at = end - timedelta(hours=3) + timedelta(minutes=170 * n / len(pairs))  # all before `end`
        for key, text, at in (
            ("old:" + pair["id"], pair["old"], new_at - timedelta(days=pair["gap_days"])),
            ("new:" + pair["id"], pair["new"], new_at),
        ):
            turns.append(Turn(key, text, at))
            filler = next(fillers)
            turns.append(Turn("d:" + filler["id"], filler["text"], at + timedelta(minutes=1)))
    turns.sort(key=lambda t: t.at)
    at = end
    for pair in asked:
        turns.append(Turn("q:" + pair["id"], pair["question"], at))
        at += timedelta(minutes=1)
    return turns


def live_instance(tmp: Path, turns: list[Turn]) -> Instance:
    """Write the turns to the inbox, ingest them and answer them all in one drain, as `cortex run`
    does before any memory asset."""
    from cortex_pipelines import clock
    from cortex_pipelines.brain.loop import Brain
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.ingest.inbox import ingest_inbox
    from cortex_pipelines.instance import init_home
    from cortex_pipelines.llm.offline import OfflineClient
    from cortex_pipelines.storage import Database

    home = tmp / "home"
    os.environ["CORTEX_HOME"] = str(home)
    os.environ["CORTEX_LLM_PROVIDER"] = "offline"
    os.environ["CORTEX_NOW"] = clock.as_offset((turns[-1].at + timedelta(minutes=1)).isoformat())
    settings = load_settings(home)
    init_home(settings)
    db = Database(settings.paths.db)
    folder = settings.paths.inbox / "webchat"
    folder.mkdir(parents=True, exist_ok=True)
    for n, turn in enumerate(turns):
        path = folder / f"{n:05d}.json"
        envelope = {
            "channel": "webchat",
            "sender": "user",
            "text": turn.text,
            "external_id": turn.key,
            "timestamp": turn.at.isoformat(),
        }
        path.write_text(json.dumps(envelope))
        os.utime(path, (turn.at.timestamp(), turn.at.timestamp()))  # the inbox reads oldest first
    timing = {}
    started = time.perf_counter()
    report = ingest_inbox(settings, db)
    timing["ingest_s"] = round(time.perf_counter() - started, 2)
    if report.rejected or report.accepted != len(turns):
        raise SystemExit(f"bench.paraphrase: ingest took {report.accepted} of {len(turns)} turns")
    started = time.perf_counter()
    drained = Brain(db, settings, OfflineClient()).drain()
    timing["drain_s"] = round(time.perf_counter() - started, 2)
    if drained.completed != len(turns):
        raise SystemExit(f"bench.paraphrase: the brain completed {drained.completed} of {len(turns)}")
    session, replies = {}, {}
    for sid, role, key, content in db.query(
        "SELECT s.id, s.role, b.external_id, s.content FROM session s JOIN bus b ON b.id = s.bus_id"
    ):
        if role == "user":
            session[key] = sid
        else:
            replies[key] = content
    label = {v: k for k, v in session.items()}
    found = db.query("SELECT old_session_id, new_session_id, cosine FROM statement_updates")
    links = [(label[old], label[new], round(cosine or 0.0, 3)) for old, new, cosine in found]
    return Instance(settings, db, session, replies, label, timing, links)


def settle(inst: Instance) -> None:
    """Materialize every memory asset, as `cortex run` does after answering."""
    from dagster import DagsterInstance

    from cortex_pipelines.definitions import defs

    started = time.perf_counter()
    with DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def("cortex_main").execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )
    inst.timing["materialize_s"] = round(time.perf_counter() - started, 2)
    if not result.success:
        raise SystemExit("bench.paraphrase: the cortex_main job failed")


@dataclass
class Ranked:
    """One system's top-k for one question: each entry's text and the session ids it came from."""

    texts: list[str]
    sources: list[list[int]]


def recall_all(inst: Instance, questions: dict[str, str]) -> tuple[dict[str, Ranked], list[float]]:
    """The production recall for each question (its own turn excluded, nothing touched)."""
    from cortex_pipelines.memory.recall import recall

    out, ms = {}, []
    for key, text in questions.items():
        started = time.perf_counter()
        hits = recall(inst.db, inst.settings, text, k=K, exclude_sources={inst.session[key]})
        ms.append((time.perf_counter() - started) * 1000)
        out[key] = Ranked([h.text for h in hits], [list(h.sources) for h in hits])
    return out, ms


def baselines(inst: Instance, questions: dict[str, str]) -> dict[str, dict[str, Ranked]]:
    """BM25 and dense top-k over the raw user turns, each question's own turn left out."""
    import Stemmer
    from bm25s import BM25
    from bm25s import tokenize as bm25_tokenize

    from cortex_pipelines.memory.embedder import embedder_for

    rows = inst.db.query("SELECT id, content FROM session WHERE role = 'user' ORDER BY id")
    ids, texts = [r[0] for r in rows], [r[1] for r in rows]
    stemmer = Stemmer.Stemmer("english")
    bm25 = BM25()
    bm25.index(
        bm25_tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    embedder = embedder_for(inst.settings)
    turn_vecs = embedder.encode(texts)
    query_vecs = embedder.encode(list(questions.values()))
    out: dict[str, dict[str, Ranked]] = {"bm25": {}, "dense": {}}

    def ranked(order, own: int) -> Ranked:
        top = [i for i in order if ids[i] != own][:K]
        return Ranked([texts[i] for i in top], [[ids[i]] for i in top])

    for (key, text), qvec in zip(questions.items(), query_vecs, strict=True):
        own = inst.session[key]
        idx, _ = bm25.retrieve(
            bm25_tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False),
            k=min(K + 1, len(texts)),
            show_progress=False,
        )
        out["bm25"][key] = ranked(idx[0], own)
        out["dense"][key] = ranked(np.argsort(-(turn_vecs @ qvec)), own)
    return out


def pct(values: list[bool]) -> float | None:
    return round(100 * statistics.fmean(values), 1) if values else None


def summary(records: list[dict], metric: str, groups: tuple[str, ...]) -> dict:
    """A metric's share (%) per split (and all), overall and per group."""
    out = {}
    for split in (*SPLITS, "all"):
        rows = [r for r in records if split == "all" or r["split"] == split]
        if not rows:
            continue
        out[split] = {"overall": pct([r[metric] for r in rows])}
        for group in groups:
            out[split][group] = pct([r[metric] for r in rows if r["group"] == group])
    return out


def measure(name: str, turns: list, questions: dict[str, str], console: Console):
    """One temporary instance: every turn through the inbox and one drain, recall live, materialize
    cortex_main, recall settled, and the baselines over the same turns."""
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        console.print(f"{len(turns)} turns ({len(questions)} questions) through the inbox and one drain")
        inst = live_instance(Path(tmp), turns)
        live, live_ms = recall_all(inst, questions)
        console.print("materializing cortex_main")
        settle(inst)
        settled, settled_ms = recall_all(inst, questions)
        return inst, live, live_ms, settled, settled_ms, baselines(inst, questions)


def run_paraphrase(split: str, console: Console, compounds: bool = False) -> dict:
    items, distractors = load_items(compounds), load_distractors()
    asked = chosen(items, split)
    turns = paraphrase_turns(items, distractors, asked)
    questions = {"q:" + i["id"]: i["question"] for i in asked}
    inst, live, live_ms, settled, settled_ms, base = measure("paraphrase", turns, questions, console)

    def found(item: dict, r: Ranked) -> bool:
        own = inst.session["s:" + item["id"]]
        return any(
            own in src and carries(text, item["answer_terms"])
            for text, src in zip(r.texts, r.sources, strict=True)
        )

    own_questions = {"d:" + d["id"] for d in distractors if d["kind"] == "own_question"}

    def asks(r: Ranked) -> bool:
        """A question the user asked (a distractor's or a set question) came back as a memory."""
        labels = [inst.label.get(s[0], "") for s in r.sources if len(s) == 1]
        return any(label.startswith("q:") or label in own_questions for label in labels)

    records = []
    for item in asked:
        key = "q:" + item["id"]
        runs = {
            "live": live[key],
            "settled": settled[key],
            "bm25": base["bm25"][key],
            "dense": base["dense"][key],
        }
        records.append(
            {
                "id": item["id"],
                "split": item["split"],
                "group": item["category"],
                "reply": carries(inst.replies.get(key, ""), item["answer_terms"]),
                **{name: found(item, r) for name, r in runs.items()},
                "asked_live": asks(live[key]),
                "asked_settled": asks(settled[key]),
                "reply_text": inst.replies.get(key, "")[:300],
                "top": {name: [t[:100] for t in r.texts] for name, r in runs.items() if name != "bm25"},
            }
        )
    metrics = ("reply", "live", "settled", "bm25", "dense", "asked_live", "asked_settled")
    return {
        "set": "compounds" if compounds else "paraphrase",
        "measure": "statement found",
        "split": split,
        "k": K,
        "questions": len(asked),
        "statements": len(items),
        "distractors": len(distractors),
        "systems": {m: summary(records, m, CATEGORIES) for m in metrics},
        "update_links": inst.links,  # the set has no knowledge updates: every link here is a false one
        "timing": {
            **inst.timing,
            "recall_live_p50_ms": round(statistics.median(live_ms), 1),
            "recall_settled_p50_ms": round(statistics.median(settled_ms), 1),
        },
        "questions_detail": records,
    }


def same_pair(old: str, new: str) -> bool:
    """Whether a detected link joins an update pair's old and new statement ("old:car" → "new:car"),
    not of a pair whose newer statement keeps the older one."""
    return (
        old.startswith("old:")
        and new.startswith("new:")
        and old[4:] == new[4:]
        and not new[4:].startswith("neg-")
    )


def links_by_half(links: list[tuple[str, str, float]], pairs: list[dict], split: str) -> dict:
    """The detected links of the asked half (or both): true ones by pair, the pairs left unlinked,
    and false ones, each counted in the half of the newer statement's pair ("distractors" when a
    distractor made it), so a tune run shows nothing of the check half."""
    half = {p["id"]: p["split"] for p in pairs}

    def half_of(label: str) -> str:
        return half.get(label.partition(":")[2], "distractors") if label.startswith("new:") else "distractors"

    out = {}
    for name in [h for h in SPLITS if split in (h, "all")] + ["distractors"]:
        true = sorted(
            (new[4:], cosine) for old, new, cosine in links if same_pair(old, new) and half_of(new) == name
        )
        out[name] = {
            "true": true,
            "missed": sorted(
                {p for p, h in half.items() if h == name and not p.startswith("neg-")}
                - {pair for pair, _ in true}
            ),
            "false": [link for link in links if not same_pair(link[0], link[1]) and half_of(link[1]) == name],
        }
    return out


def run_updates(split: str, console: Console, others: bool = False) -> dict:
    pairs, distractors = load_updates(others), load_distractors()
    asked = chosen(pairs, split)
    turns = update_turns(pairs, distractors, asked)
    questions = {"q:" + p["id"]: p["question"] for p in asked}
    inst, live, _, settled, _, base = measure("updates", turns, questions, console)

    def first(pair: dict, texts: list[str]) -> str | None:
        return next(
            (kind for t in texts if (kind := first_term(t, pair["current_terms"], pair["stale_terms"]))), None
        )

    def own(pair: dict, ranked: Ranked) -> list[str]:
        """The hits that come from the pair's own statements (a fact drawn from one included): a
        weekday or a month another pair says must not answer for this one."""
        said = {inst.session["old:" + pair["id"]], inst.session["new:" + pair["id"]]}
        return [t for t, sources in zip(ranked.texts, ranked.sources, strict=True) if said & set(sources)]

    def own_lines(pair: dict, reply: str) -> list[str]:
        """The reply's lines quoting the pair's statements (the offline reply names each line's
        message: "…; msg 12)"); the whole reply when it names none."""
        said = {inst.session["old:" + pair["id"]], inst.session["new:" + pair["id"]]}
        quoting = [line for line in reply.splitlines() if MSG_ID.search(line)]
        if not quoting:
            return [reply]
        return [
            line
            for line in quoting
            if said & {int(n) for ids in MSG_ID.findall(line) for n in ids.split(", ")}
        ]

    records = []
    for pair in asked:
        key = "q:" + pair["id"]
        reply = inst.replies.get(key, "")
        runs = {
            "live": live[key],
            "settled": settled[key],
            "bm25": base["bm25"][key],
            "dense": base["dense"][key],
        }
        firsts = {
            "reply": first(pair, own_lines(pair, reply)),
            **{n: first(pair, own(pair, r)) for n, r in runs.items()},
        }
        records.append(
            {
                "id": pair["id"],
                "split": pair["split"],
                "group": "kept" if kept(pair) else "updated",
                **{n: f == "current" for n, f in firsts.items()},
                "first": firsts,
                "reply_text": reply[:300],
                "top": {n: [t[:100] for t in r.texts] for n, r in runs.items() if n != "bm25"},
            }
        )
    return {
        "set": "updates-others" if others else "updates",
        "measure": "current-value-first",
        "split": split,
        "k": K,
        "questions": len(asked),
        "pairs": len(pairs),
        "systems": {
            m: summary(records, m, UPDATE_GROUPS) for m in ("reply", "live", "settled", "bm25", "dense")
        },
        "update_links": links_by_half(inst.links, pairs, split),
        "timing": inst.timing,
        "questions_detail": records,
    }


LABELS = {
    "reply": "reply, live",
    "live": f"recall@{K} live",
    "settled": f"recall@{K} settled",
    "bm25": f"BM25@{K} raw turns",
    "dense": f"dense@{K} raw turns",
    "asked_live": f"question in top {K}, live",
    "asked_settled": f"question in top {K}, settled",
}


def print_tables(out: dict, console: Console, columns: tuple[str, ...]) -> None:
    present = next(iter(out["systems"].values()))
    for split in [s for s in present if s != "all" or len(present) > 2]:
        n = sum(1 for r in out["questions_detail"] if split == "all" or r["split"] == split)
        table = Table(title=f"{out['set']}, split {split}: {n} questions, {out['measure']} (%)")
        table.add_column("system")
        for column in ("overall", *columns):
            table.add_column(column[:7], justify="right")
        for metric, by_split in out["systems"].items():
            row = [by_split[split][c] for c in ("overall", *columns)]
            table.add_row(LABELS[metric], *("-" if v is None else f"{v:.0f}" for v in row))
        console.print(table)
    links = out.get("update_links")
    if isinstance(links, dict):
        for name, found in links.items():
            true, missed, false = found["true"], found["missed"], found["false"]
            console.print(
                f"update links, {name}: {len(true)} true {true}, missed {missed}, {len(false)} false {false}"
            )
    elif links is not None:
        console.print(f"update links (none intended): {len(links)} {links}")
    console.print(f"timing: {out['timing']}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=(*SPLITS, "all"), default="check")
    parser.add_argument("--updates", action="store_true", help="the knowledge-update set instead")
    parser.add_argument(
        "--others",
        action="store_true",
        help="with --updates: changes of people and things the user tells about (updates_others.jsonl)",
    )
    parser.add_argument(
        "--compounds",
        action="store_true",
        help="the set of names written as words run together (compounds.jsonl) instead",
    )
    parser.add_argument("--recall-preset", default="default", help="a RecallConfig preset by name")
    parser.add_argument("--json", type=Path, default=None, help="default bench/results/<set>-<split>.json")
    args = parser.parse_args(argv)
    os.environ["CORTEX_RECALL_PRESET"] = args.recall_preset  # recall and the brain's auto-recall
    console = Console(width=120)
    if args.others and not args.updates:
        parser.error("--others is a part of the update set: use it with --updates")
    if args.compounds and args.updates:
        parser.error("--compounds is a paraphrase set: use it without --updates")
    out = (
        run_updates(args.split, console, args.others)
        if args.updates
        else run_paraphrase(args.split, console, args.compounds)
    )
    out["recall_preset"] = args.recall_preset
    print_tables(out, console, UPDATE_GROUPS if args.updates else CATEGORIES)
    target = args.json or Path(f"bench/results/{out['set']}-{args.split}-{args.recall_preset}.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=2) + "\n")
    console.print(f"figures: {target}")
    return out


if __name__ == "__main__":
    main()
