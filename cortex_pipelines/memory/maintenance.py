"""The gardener's slower work (seeds 000 and 004): eviction to cold, decay, pruning, merging
near-duplicates and cross-channel consolidation. Nothing is deleted: every change is a status or
tier move with an audit event, and identity memories never decay."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from cortex_pipelines.config import Settings
from cortex_pipelines.memory.embedder import Embedder
from cortex_pipelines.memory.pipeline import sync_facts
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, VectorStore
from cortex_pipelines.storage import Database, facts, utcnow


@dataclass
class MaintenanceReport:
    decayed: int = 0
    pruned: list[int] = field(default_factory=list)
    merged: list[tuple[int, int]] = field(default_factory=list)  # (absorbed, survivor)
    consolidated: list[tuple[int, int]] = field(default_factory=list)
    resynced: int = 0  # facts whose LanceDB row was missing or stale


def maintain(db: Database, vectors: VectorStore, embedder: Embedder, settings: Settings) -> MaintenanceReport:
    """The daily upkeep: decay and prune, merge and consolidate, resync LanceDB, then compact both
    tables and save recall's snapshot of their new versions (so no query has to build it)."""
    report = MaintenanceReport()
    decay_and_prune(db, settings, report)
    merge_and_consolidate(db, vectors, settings, report)
    report.resynced = sync_facts(db, vectors, embedder, settings, rebuild_outdated=True)
    for table in (EPISODIC, SEMANTIC):
        vectors.optimize(table)
        vectors.snapshot(table)
    return report


def evict_to_cold(db: Database, vectors: VectorStore, settings: Settings) -> list[int]:
    """Hot facts older than cold_after_days with fewer than cold_min_hits hits go cold."""
    ids = db.run(
        facts.evict_stale_hot,
        utcnow() - timedelta(days=settings.cold_after_days),
        settings.cold_min_hits,
        f"older than {settings.cold_after_days:g} days, fewer than {settings.cold_min_hits} hits",
    )
    vectors.update(SEMANTIC, ids, {"tier": "cold"})
    return ids


def decay_and_prune(db: Database, settings: Settings, report: MaintenanceReport) -> None:
    now = utcnow()
    idle_since = now - timedelta(days=settings.decay_after_days)
    old_enough = now - timedelta(days=settings.prune_min_age_days)

    def apply(con):
        decayed = facts.decay_idle(con, idle_since, settings.decay_factor, settings.decay_floor)
        pruned = facts.prune_decayed(con, settings.prune_threshold, old_enough, "decayed below threshold")
        return decayed, pruned

    report.decayed, report.pruned = db.run(apply)


def similar_pairs(matrix: np.ndarray, threshold: float) -> list[tuple[int, int, float]]:
    pairs = []
    for start in range(0, len(matrix), 1024):
        block = matrix[start : start + 1024] @ matrix.T
        for i, j in zip(*np.nonzero(block >= threshold), strict=True):
            a = start + int(i)
            if a < int(j):
                pairs.append((a, int(j), float(block[i, j])))
    return sorted(pairs, key=lambda p: -p[2])


def merge_and_consolidate(
    db: Database, vectors: VectorStore, settings: Settings, report: MaintenanceReport
) -> None:
    """Near-duplicates (cosine ≥ merge_cosine) merge; the same fact from different channels
    (cosine ≥ consolidate_cosine, same category) is consolidated into the most important one."""
    rows, matrix = vectors.active_fact_vectors()
    if len(rows) < 2:
        return
    ids = [r["id"] for r in rows]
    known = {f["id"]: f for f in db.run(facts.active)}
    gone: set[int] = set()
    threshold = min(settings.merge_cosine, settings.consolidate_cosine)
    for a, b, cosine in similar_pairs(matrix, threshold):
        fa, fb = known.get(ids[a]), known.get(ids[b])
        if fa is None or fb is None or fa["id"] in gone or fb["id"] in gone:
            continue
        if cosine >= settings.merge_cosine:
            kind = "merged near-duplicate"
        elif fa["category"] == fb["category"] and not set(fa["channels"]) & set(fb["channels"]):
            kind = "consolidated across channels"
        else:
            continue
        survivor, absorbed = sorted((fa, fb), key=lambda f: (-f["importance"], -f["hit_count"], f["id"]))
        db.run(facts.supersede, absorbed["id"], survivor["id"], f"{kind} (cosine {cosine:.3f})")
        gone.add(absorbed["id"])
        pair = (absorbed["id"], survivor["id"])
        (report.merged if kind.startswith("merged") else report.consolidated).append(pair)
