"""SIGKILL during an asset's LanceDB write leaves memory that reopens and catches up exactly.

tests/support/crash_worker.py runs, as a real process, what the memory assets run: index_episodes (the
`episodic_memory` asset: 1,100 new session messages in batches of 512 after 400 indexed),
sync_facts (150 new facts, 30 corrections and the 30 facts they supersede, 10 forgotten, beside 300
indexed ones) or extract_new_facts (the `extracted_facts` asset: 44 preferences in the new turns),
and kills it before or after a LanceDB commit, or on a timer somewhere in the writes (half the
time on a fresh LanceDB folder, where the first write creates the table and the last builds its
full-text index).
Then LanceDB must open and scan cleanly, and the real Dagster `materialize` of both assets must
leave exactly one episodic row per session message and one semantic row per fact, with DuckDB's
text and status, no fact twice, and both cursors at the end. The timer cases are drawn at random;
the seed is in the test id (re-run with CRASH_SEED=<seed>).
"""

import json
import os
import random
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dagster import materialize

from cortex_pipelines.assets.memory import episodic_memory, extracted_facts
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_path
from cortex_pipelines.instance import init_home
from cortex_pipelines.memory.pipeline import EPISODIC_CURSOR, EXTRACTION_CURSOR, index_episodes, sync_facts
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, VectorStore, import_lancedb
from cortex_pipelines.resources import EmbedderResource, cortex_resources
from cortex_pipelines.storage import Database, cursors, utcnow
from cortex_pipelines.storage import facts as fact_store
from cortex_pipelines.storage.facts import FactDraft
from tests.support.crash_worker import HashEmbedder, run_worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

INDEXED_TURNS, NEW_TURNS = 400, 1100
INDEXED_FACTS, EDITED, FORGOTTEN, NEW_FACTS = 300, 30, 10, 150
PREFERENCE_EVERY = 25  # every 25th new turn states a preference: 44 facts to extract
_T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
_WORDS = "flight boathouse library window sister taxi coworking river dentist lisbon".split()

SEED = int(os.environ["CRASH_SEED"])  # drawn once per test run in conftest.py
_rng = random.Random(SEED)
# Timer kills, on the existing tables or (drawn at random) on a fresh LanceDB folder. Existing:
# armed as a random batch's write starts, firing within about one write. Fresh: armed at the first
# write (which creates the table), firing anywhere up to the end of the write.
_FRESH = {name: _rng.random() < 0.5 for name in ("episodic", "semantic")}
_EPISODIC_BATCH = 1 if _FRESH["episodic"] else _rng.randint(1, 3)
_EPISODIC_MS = _rng.randint(0, 400 if _FRESH["episodic"] else 80)
_SEMANTIC_MS = _rng.randint(0, 120 if _FRESH["semantic"] else 40)
_TIMER_ID = {name: f"{'fresh-' if fresh else ''}{name}-timer-seed{SEED}" for name, fresh in _FRESH.items()}
CASES = [
    pytest.param("episodic_before_upsert", 2, 1, False, id="episodic-between_batches_1_and_2"),
    pytest.param("episodic_after_upsert", 3, 1, False, id="episodic-last_batch_committed_cursor_not"),
    pytest.param("semantic_after_upsert", 1, 1, False, id="semantic-committed_not_marked_indexed"),
    pytest.param("extraction_after_upsert", 2, 1, False, id="extraction-new_facts_committed_cursor_not"),
    pytest.param(
        "episodic_timer",
        _EPISODIC_MS,
        _EPISODIC_BATCH,
        _FRESH["episodic"],
        id=f"{_TIMER_ID['episodic']}-batch{_EPISODIC_BATCH}+{_EPISODIC_MS}ms",
    ),
    pytest.param(
        "semantic_timer", _SEMANTIC_MS, 1, _FRESH["semantic"], id=f"{_TIMER_ID['semantic']}-{_SEMANTIC_MS}ms"
    ),
]


class HashEmbedderResource(EmbedderResource):
    """HashEmbedder in place of the model, so rematerializing does not load it."""

    def get(self) -> HashEmbedder:
        return HashEmbedder()


def _said(i: int) -> str:
    word = _WORDS[i % len(_WORDS)]
    if i >= INDEXED_TURNS and i % PREFERENCE_EVERY == 0:
        return f"I prefer the {word} plan number {i} on weekends."
    return f"turn {i}: about the {word}, note {i * 7919 % 10007}"


def _turns(tmp: Path, start: int, count: int) -> Path:
    path = tmp / f"turns-{start}.jsonl"
    lines = [
        {
            "channel": ("webchat", "telegram", "whatsapp")[i % 3],
            "sender": "maya",
            "text": _said(i),
            "external_id": f"turn-{i}",
            "timestamp": (_T0 + timedelta(minutes=i)).isoformat(),
        }
        for i in range(start, start + count)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _draft(i: int) -> FactDraft:
    return FactDraft(
        f"fact {i}: maya likes the {_WORDS[i % len(_WORDS)]} {i}", "preference", 2, (i,), (), utcnow()
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A home whose older memory is indexed and whose newer memory waits for its LanceDB write."""
    root = tmp_path_factory.mktemp("lancedb-template")
    settings = load_settings(root / "home")
    init_home(settings)
    db, vectors, embedder = Database(settings.paths.db), VectorStore(settings.paths.lance), HashEmbedder()
    assert ingest_path(_turns(root, 0, INDEXED_TURNS), settings, db, history=True).accepted == INDEXED_TURNS
    assert index_episodes(db, vectors, embedder, settings) == INDEXED_TURNS
    extracted = db.query("SELECT max(id) FROM session")[0][0]
    db.run(cursors.write, EXTRACTION_CURSOR, extracted)  # the older turns' facts are in already
    assert (
        ingest_path(_turns(root, INDEXED_TURNS, NEW_TURNS), settings, db, history=True).accepted == NEW_TURNS
    )

    ids = db.run(lambda con: [fact_store.insert(con, _draft(i)) for i in range(INDEXED_FACTS)])
    assert sync_facts(db, vectors, embedder, settings) == INDEXED_FACTS

    def change(con):
        for fact_id in ids[:EDITED]:
            fact_store.edit(con, fact_id, f"corrected fact {fact_id}: maya prefers the aisle")
        for fact_id in ids[EDITED : EDITED + FORGOTTEN]:
            fact_store.forget(con, fact_id, "the user said it was wrong")
        for i in range(INDEXED_FACTS, INDEXED_FACTS + NEW_FACTS):
            fact_store.insert(con, _draft(i))

    db.run(change)
    assert len(db.run(fact_store.unindexed)) == NEW_FACTS + 2 * EDITED + FORGOTTEN
    return root / "home"


def lance_rows(path: Path, name: str) -> list[dict]:
    """A full scan of a table through a fresh connection: every data file is read."""
    return (
        import_lancedb()
        .connect(str(path))
        .open_table(name)
        .to_arrow()
        .select(["id", "text", "status"] if name == SEMANTIC else ["id", "text"])
        .to_pylist()
    )


def assert_memory_mirrors_duckdb(db: Database, lance: Path) -> None:
    episodes = lance_rows(lance, EPISODIC)
    ids = [r["id"] for r in episodes]
    assert len(ids) == len(set(ids)), "duplicate episodic rows"
    session = dict(db.query("SELECT id, content FROM session WHERE content <> '[silence]'"))
    assert len(session) == INDEXED_TURNS + NEW_TURNS
    assert {r["id"]: r["text"] for r in episodes} == session  # one row per message, nothing missing
    assert db.run(cursors.read, EPISODIC_CURSOR) == max(session)

    facts = lance_rows(lance, SEMANTIC)
    ids = [r["id"] for r in facts]
    assert len(ids) == len(set(ids)), "duplicate semantic rows"
    truth = {r[0]: (r[1], r[2]) for r in db.query("SELECT id, text, status FROM facts")}
    assert {r["id"]: (r["text"], r["status"]) for r in facts} == truth
    active = sum(status == "active" for _, status in truth.values())
    assert active == INDEXED_FACTS - FORGOTTEN + NEW_FACTS + NEW_TURNS // PREFERENCE_EVERY
    assert db.run(fact_store.unindexed) == []
    twice = db.query(
        "SELECT any_value(text) FROM facts WHERE status = 'active' GROUP BY norm_hash HAVING count(*) > 1"
    )
    assert twice == [], twice  # no fact extracted twice by the re-run after the crash
    assert db.run(cursors.read, EXTRACTION_CURSOR) == max(session)

    # Recall still finds a new fact by its vector and an old turn by its words.
    vectors, embedder = VectorStore(lance), HashEmbedder()
    newest = max(truth)
    hit = vectors.vector_search(SEMANTIC, embedder.encode([truth[newest][0]])[0], 1, "status = 'active'")
    assert hit[0]["id"] == newest
    episodes = vectors.snapshot(EPISODIC)
    assert episodes.text_search("boathouse", 3, episodes.where())


@pytest.mark.parametrize(("point", "n", "call", "fresh"), CASES)
def test_sigkill_during_a_lancedb_write_loses_and_doubles_nothing(point, n, call, fresh, template, tmp_path):
    print(f"CRASH_SEED={SEED} point={point} n={n} call={call} fresh={fresh}")
    home = tmp_path / "home"
    shutil.copytree(template, home)
    settings = load_settings(home)
    db = Database(settings.paths.db)
    if fresh:  # nothing indexed yet: the first write creates the table, the last builds its index
        shutil.rmtree(settings.paths.lance)
        db.run(cursors.write, EPISODIC_CURSOR, 0)
        db.run(lambda con: con.execute("UPDATE facts SET indexed_at = NULL"))

    proc = run_worker(home, point, n, call)
    landed = [line for line in proc.stderr.splitlines() if line.startswith("crash_worker:")]
    print("\n".join(landed))

    # Restart: the real assets, each resuming from what the crash left.
    cursor = db.run(cursors.read, EPISODIC_CURSOR)
    behind = db.query("SELECT count(*) FROM session WHERE id > ?", [cursor])[0][0]
    resources = cortex_resources(str(home))
    resources["embedder"] = HashEmbedderResource(settings=resources["settings"])
    result = materialize([episodic_memory, extracted_facts], resources=resources)
    assert result.success
    episodic = result.asset_materializations_for_node("episodic_memory")[0].metadata
    assert episodic["indexed"].value == behind
    assert episodic["episodic_rows"].value == INDEXED_TURNS + NEW_TURNS

    assert_memory_mirrors_duckdb(db, settings.paths.lance)
    # A second pass has nothing to do: the cursor and indexed_at moved past everything.
    vectors = VectorStore(settings.paths.lance)
    assert index_episodes(db, vectors, HashEmbedder(), settings) == 0
    assert sync_facts(db, vectors, HashEmbedder(), settings) == 0
