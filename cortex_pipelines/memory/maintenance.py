"""The gardener's slower work (seeds 000 and 004): eviction to cold, decay, pruning, merging
near-duplicates and cross-channel consolidation. Nothing is deleted: every change is a status or
tier move with an audit event, and identity memories never decay."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from cortex_pipelines.config import Settings
from cortex_pipelines.memory import store
from cortex_pipelines.memory.vectors import SEMANTIC, VectorStore
from cortex_pipelines.storage import Database, facts, utcnow


@dataclass
class MaintenanceReport:
    decayed: int = 0
    pruned: list[int] = field(default_factory=list)
    merged: list[tuple[int, int]] = field(default_factory=list)  # (absorbed, survivor)
    consolidated: list[tuple[int, int]] = field(default_factory=list)


def evict_to_cold(db: Database, vectors: VectorStore, settings: Settings) -> list[int]:
    """Hot facts older than cold_after_days with fewer than cold_min_hits hits go cold."""
    cutoff = utcnow() - timedelta(days=settings.cold_after_days)

    def evict(con):
        ids = [
            r[0]
            for r in con.execute(
                "SELECT id FROM facts WHERE status = 'active' AND tier = 'hot' AND created_at < ? "
                "AND hit_count < ? AND category <> 'identity' ORDER BY id",
                [cutoff, settings.cold_min_hits],
            ).fetchall()
        ]
        store.set_tier(
            con,
            ids,
            "cold",
            reason=f"older than {settings.cold_after_days:g} days, fewer than {settings.cold_min_hits} hits",
        )
        return ids

    ids = db.run(evict)
    vectors.update(SEMANTIC, ids, {"tier": "cold"})
    return ids


def decay_and_prune(db: Database, settings: Settings, report: MaintenanceReport) -> None:
    now = utcnow()
    idle_since = now - timedelta(days=settings.decay_after_days)
    old_enough = now - timedelta(days=settings.prune_min_age_days)

    def apply(con):
        report.decayed = len(
            con.execute(
                "UPDATE facts SET decay = greatest(decay * ?, ?) "
                "WHERE status = 'active' AND category <> 'identity' "
                "AND coalesce(last_accessed_at, created_at) < ? RETURNING id",
                [settings.decay_factor, settings.decay_floor, idle_since],
            ).fetchall()
        )
        doomed = [
            r[0]
            for r in con.execute(
                "SELECT id FROM facts WHERE status = 'active' AND category <> 'identity' "
                "AND decay < ? AND created_at < ? ORDER BY id",
                [settings.prune_threshold, old_enough],
            ).fetchall()
        ]
        for fact_id in doomed:
            facts.prune(con, fact_id, reason="decayed below threshold")
        report.pruned = doomed

    db.run(apply)


def active_vectors(vectors: VectorStore) -> tuple[list[dict], np.ndarray]:
    if not vectors.exists(SEMANTIC):
        return [], np.zeros((0, 0), dtype=np.float32)
    table = (
        vectors.table(SEMANTIC)
        .search()
        .where("status = 'active'")
        .select(["id", "vector", "channel", "category"])
        .limit(None)
        .to_arrow()
    )
    rows = table.select(["id", "channel", "category"]).to_pylist()
    matrix = np.array(table.column("vector").to_pylist(), dtype=np.float32).reshape(len(rows), -1)
    return rows, matrix


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
    rows, matrix = active_vectors(vectors)
    if len(rows) < 2:
        return
    ids = [r["id"] for r in rows]
    facts = {f["id"]: f for f in db.run(store.active)}
    gone: set[int] = set()
    threshold = min(settings.merge_cosine, settings.consolidate_cosine)
    for a, b, cosine in similar_pairs(matrix, threshold):
        fa, fb = facts.get(ids[a]), facts.get(ids[b])
        if fa is None or fb is None or fa["id"] in gone or fb["id"] in gone:
            continue
        if cosine >= settings.merge_cosine:
            kind = "merged near-duplicate"
        elif fa["category"] == fb["category"] and not set(fa["channels"]) & set(fb["channels"]):
            kind = "consolidated across channels"
        else:
            continue
        survivor, absorbed = sorted((fa, fb), key=lambda f: (-f["importance"], -f["hit_count"], f["id"]))
        db.run(store.supersede, absorbed["id"], survivor["id"], f"{kind} (cosine {cosine:.3f})")
        gone.add(absorbed["id"])
        pair = (absorbed["id"], survivor["id"])
        (report.merged if kind.startswith("merged") else report.consolidated).append(pair)
