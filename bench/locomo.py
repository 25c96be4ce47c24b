"""LoCoMo retrieval: the production memory_query against BM25 and dense baselines, same run.

Protocol (Maharana et al., ACL 2024, Table 3, turn level): per conversation, a fresh CORTEX_HOME;
every turn goes through the real ingest path as history (`cortex ingest --history`), the memory
assets are materialized with the offline provider, then each question is put to memory_query.
Ranked hits expand to their source turns in rank order (repeats dropped, cut at k); the score of
a question is the fraction of its evidence turns found in the top k. Questions and answers are
never read before querying; the dataset's summaries and observations are never used.

The five development conversations are split by conversation: recall is tuned on `--split tune`
(conv-26, conv-30, conv-41: 497 questions) and reported on `--split check` (conv-42, conv-43: 502).

    python -m bench.locomo --split check --json bench/results/locomo-check.json
    python -m bench.locomo --split tune --recall-preset conversation
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

KS = (5, 10, 25, 50)
CATEGORIES = ("1", "2", "3", "4", "5")
CATEGORY_NAMES = {
    "1": "multi-hop",
    "2": "temporal",
    "3": "open-domain",
    "4": "single-hop",
    "5": "adversarial",
}
PUBLISHED_DRAGON = {"R@5": 56.7, "R@10": 66.2, "R@25": 76.7, "R@50": 82.7}
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
SPLITS = {"tune": ("conv-26", "conv-30", "conv-41"), "check": ("conv-42", "conv-43")}


def evidence_ids(raw: list) -> list[str]:
    """Normalize evidence strings, including the malformed ones ("D8:6; D9:17", "D:11:26", "D30:05")."""
    ids = []
    for item in raw:
        for a, b in _EVIDENCE.findall(str(item)):
            ident = f"D{int(a)}:{int(b)}"
            if ident not in ids:
                ids.append(ident)
    return ids


def turn_text(turn: dict) -> str:
    text = turn.get("text", "")
    if turn.get("blip_caption"):
        text = f"{text} [shares a photo: {turn['blip_caption']}]"
    return text


def conversation_turns(sample: dict) -> list[dict]:
    """Envelopes for every turn, with the session date as timestamp, a few seconds apart."""
    conv = sample["conversation"]
    sessions = sorted(
        (int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k)),
    )
    rows = []
    for n in sessions:
        start = datetime.strptime(conv[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y")
        for i, turn in enumerate(conv[f"session_{n}"]):
            text = turn_text(turn).strip()
            if not text:
                continue
            rows.append(
                {
                    "channel": "webchat",
                    "text": text[:60000],
                    "sender": turn["speaker"],
                    "external_id": turn["dia_id"],
                    "timestamp": (start + timedelta(seconds=10 * i)).isoformat() + "Z",
                }
            )
    return rows


def recall_at(ranked: list[str], gold: list[str], k: int) -> float:
    top = set(ranked[:k])
    return sum(1 for g in gold if g in top) / len(gold)


class Scores:
    def __init__(self):
        self.values: dict[str, dict[str, list[float]]] = {f"R@{k}": defaultdict(list) for k in KS}

    def add(self, ranked: list[str], gold: list[str], category: str) -> None:
        for k in KS:
            value = recall_at(ranked, gold, k)
            self.values[f"R@{k}"][category].append(value)
            self.values[f"R@{k}"]["overall"].append(value)

    def summary(self) -> dict:
        return {
            metric: {
                c: round(100 * statistics.fmean(v), 1) if (v := by_cat.get(c)) else None
                for c in ("overall", *CATEGORIES)
            }
            for metric, by_cat in self.values.items()
        }


def expand(hits, session_to_dia: dict[int, str]) -> list[str]:
    ranked: list[str] = []
    for hit in hits:
        for source in hit.sources:
            dia = session_to_dia.get(source)
            if dia and dia not in ranked:
                ranked.append(dia)
    return ranked


def run_conversation(sample: dict, embedder, timing: dict, scores: dict[str, Scores], progress, task):
    import Stemmer
    from bm25s import BM25
    from bm25s import tokenize as bm25_tokenize
    from dagster import DagsterInstance, materialize

    from cortex_pipelines.assets import ALL_ASSETS
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.ingest.inbox import ingest_path
    from cortex_pipelines.instance import init_home
    from cortex_pipelines.memory.recall import recall
    from cortex_pipelines.resources import cortex_resources
    from cortex_pipelines.storage import Database

    rows = conversation_turns(sample)
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        home = Path(tmp) / "home"
        os.environ["CORTEX_HOME"] = str(home)
        # Two people telling each other about their lives: both are owners, so what each says about
        # themselves is extracted as it would be from the user.
        home.mkdir()
        speakers = sorted({r["sender"] for r in rows})
        (home / "config.toml").write_text(f"[owners]\nwebchat = {json.dumps(speakers)}\n")
        settings = load_settings(home, llm_provider="offline")
        init_home(settings)
        db = Database(settings.paths.db)
        source = Path(tmp) / f"{sample['sample_id']}.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))

        started = time.perf_counter()
        report = ingest_path(source, settings, db, history=True)
        timing["ingest_s"] += time.perf_counter() - started
        if report.rejected:
            raise SystemExit(f"ingest rejected {report.rejected[0].path}: {report.rejected[0].error}")

        memory = [
            a
            for a in ALL_ASSETS
            if a.key.path[0]
            in (
                "session_messages",
                "episodic_memory",
                "extracted_facts",
                "harvested_ops",
                "memory_maintenance",
                "observations",  # the protocol's "memory assets": observations are memories too
            )
        ]
        started = time.perf_counter()
        with DagsterInstance.ephemeral() as instance:
            result = materialize(
                memory,
                instance=instance,
                resources=cortex_resources(str(home)),
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
        timing["materialize_s"] += time.perf_counter() - started
        if not result.success:
            raise SystemExit("materializing the memory assets failed")

        session_to_dia = dict(
            db.query("SELECT s.id, b.external_id FROM session s JOIN bus b ON b.id = s.bus_id")
        )
        dia_order = [r["external_id"] for r in rows]
        # The baselines see what cortex sees: each turn with its speaker (questions name people).
        texts = [f"{r['sender']}: {r['text']}" for r in rows]

        stemmer = Stemmer.Stemmer("english")
        bm25 = BM25()
        bm25.index(
            bm25_tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
        )
        turn_vecs = embedder.encode(texts)

        for qa in sample["qa"]:
            gold = evidence_ids(qa.get("evidence") or [])
            if not gold:
                progress.advance(task)
                continue
            category = str(qa["category"])
            question = qa["question"]
            started = time.perf_counter()
            hits = recall(db, settings, question, k=max(KS))
            timing["query_ms"].append((time.perf_counter() - started) * 1000)
            scores["cortex"].add(expand(hits, session_to_dia), gold, category)

            idx, _ = bm25.retrieve(
                bm25_tokenize([question], stopwords="en", stemmer=stemmer, show_progress=False),
                k=min(max(KS), len(texts)),
                show_progress=False,
            )
            scores["bm25"].add([dia_order[i] for i in idx[0]], gold, category)

            qvec = embedder.encode([question])[0]
            order = np.argsort(-(turn_vecs @ qvec))[: max(KS)]
            scores["dense"].add([dia_order[i] for i in order], gold, category)
            progress.advance(task)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo/locomo_dev.json"))
    parser.add_argument("--split", choices=(*SPLITS, "all"), default="check")
    parser.add_argument("--recall-preset", default="default", help="a RecallConfig preset by name")
    parser.add_argument("--json", type=Path, default=None, help="default bench/results/locomo-<split>.json")
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    args = parser.parse_args(argv)
    os.environ["CORTEX_RECALL_PRESET"] = args.recall_preset
    args.json = args.json or Path(f"bench/results/locomo-{args.split}.json")
    console = Console()
    if not args.data.is_file():
        raise SystemExit(f"bench.locomo: no dataset at {args.data}")

    from cortex_pipelines.memory.embedder import get_embedder

    wanted = [c for split in SPLITS.values() for c in split] if args.split == "all" else SPLITS[args.split]
    samples = [s for s in json.loads(args.data.read_text()) if s["sample_id"] in wanted][: args.limit]
    embedder = get_embedder()
    scores = {name: Scores() for name in ("cortex", "bm25", "dense")}
    timing = {"ingest_s": 0.0, "materialize_s": 0.0, "query_ms": []}
    questions = sum(len(s["qa"]) for s in samples)
    with Progress(console=console) as progress:
        task = progress.add_task("LoCoMo questions", total=questions)
        for sample in samples:
            progress.update(task, description=f"LoCoMo {sample['sample_id']}")
            run_conversation(sample, embedder, timing, scores, progress, task)
    answered = len(scores["cortex"].values["R@10"]["overall"])
    q = sorted(timing["query_ms"])
    out = {
        "dataset": str(args.data),
        "split": args.split,
        "conversations": [s["sample_id"] for s in samples],
        "recall_preset": args.recall_preset,
        "questions": answered,
        "k": list(KS),
        "systems": {name: s.summary() for name, s in scores.items()},
        "published": {"dragon_turn_level_overall": PUBLISHED_DRAGON},
        "timing": {
            "ingest_s": round(timing["ingest_s"], 2),
            "materialize_s": round(timing["materialize_s"], 2),
            "query_p50_ms": round(statistics.median(q), 1) if q else 0.0,
            "query_p95_ms": round(q[int(0.95 * (len(q) - 1))], 1) if q else 0.0,
        },
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n")
    table = Table(title=f"LoCoMo turn-level recall, {answered} questions (%)")
    table.add_column("system")
    for metric in (f"R@{k}" for k in KS):
        table.add_column(metric, justify="right")
    for name, summary in out["systems"].items():
        table.add_row(name, *(f"{summary[f'R@{k}']['overall']:.1f}" for k in KS))
    table.add_row("DRAGON (paper)", *(f"{PUBLISHED_DRAGON[f'R@{k}']:.1f}" for k in KS))
    console.print(table)
    cat = Table(title="R@10 by category (%)")
    cat.add_column("system")
    for c in CATEGORIES:
        cat.add_column(f"{c} {CATEGORY_NAMES[c]}", justify="right")
    for name, summary in out["systems"].items():
        cat.add_row(name, *(f"{summary['R@10'][c]:.1f}" for c in CATEGORIES))
    console.print(cat)
    console.print(f"timing: {out['timing']}")
    return out


if __name__ == "__main__":
    main()
