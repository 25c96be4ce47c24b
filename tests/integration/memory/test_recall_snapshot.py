"""Recall reads in-memory snapshots of the LanceDB tables: fresh after any writer's commit, exact
enough in float16, and stemmed like the full-text search a user expects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pyarrow.compute as pc
import pyarrow.feather as feather
import pytest

from cortex_pipelines.memory.embedder import get_embedder
from cortex_pipelines.memory.pipeline import index_episodes
from cortex_pipelines.memory.recall import recall
from cortex_pipelines.memory.snapshot import Snapshot
from cortex_pipelines.memory.vectors import EPISODIC, QUIET_VERSIONS_NS, VectorStore, vector_store
from tests.support.history import ingest_history


@pytest.fixture(scope="module")
def embedder():
    return get_embedder()


def test_a_turn_indexed_by_another_writer_is_found_by_the_next_query(settings, db, embedder, tmp_path):
    ingest_history(settings, db, tmp_path, ("webchat", "The boathouse key hangs behind the kitchen door."))
    writer = VectorStore(settings.paths.lance)  # its own LanceDB handles, as another process has
    index_episodes(db, writer, embedder, settings)
    assert recall(db, settings, "where is the boathouse key", k=1)[0].text.startswith("The boat")
    before = vector_store(settings.paths.lance).snapshot(EPISODIC).version

    later = ingest_history(
        settings, db, tmp_path, ("telegram", "My passport expires in March, renew it soon.")
    )
    index_episodes(db, writer, embedder, settings)
    hits = recall(db, settings, "when does my passport expire", k=1)
    assert hits[0].sources == later
    assert vector_store(settings.paths.lance).snapshot(EPISODIC).version > before


def test_a_commit_after_a_quiet_spell_is_found_by_the_next_query(settings, db, embedder, tmp_path):
    """While a table's folder of versions stays quiet, recall does not ask LanceDB for the version:
    another writer's next commit must still be seen at once."""
    ingest_history(settings, db, tmp_path, ("webchat", "The boathouse key hangs behind the kitchen door."))
    writer = VectorStore(settings.paths.lance)
    index_episodes(db, writer, embedder, settings)
    reader = VectorStore(settings.paths.lance)
    time.sleep(QUIET_VERSIONS_NS / 1e9 + 0.2)
    quiet = reader.snapshot(EPISODIC)
    assert reader.snapshot(EPISODIC) is quiet

    later = ingest_history(
        settings, db, tmp_path, ("telegram", "My passport expires in March, renew it soon.")
    )
    index_episodes(db, writer, embedder, settings)  # moves the episodic cursor past the new turn
    time.sleep(QUIET_VERSIONS_NS / 1e9 + 0.2)  # quiet again: only the folder's new time tells
    assert reader.snapshot(EPISODIC).version > quiet.version
    assert recall(db, settings, "when does my passport expire", k=1, vectors=reader)[0].sources == later


def test_words_match_across_inflections_before_and_after_indexing(settings, db, embedder, tmp_path):
    said = ingest_history(
        settings,
        db,
        tmp_path,
        ("webchat", "I went running along the canals every morning in Utrecht."),
        ("webchat", "The quarterly budget review moved to Thursday."),
    )
    # Not indexed yet: the unindexed tail is matched by stemmed keywords.
    assert recall(db, settings, "run canal", k=1)[0].sources == [said[0]]
    index_episodes(db, VectorStore(settings.paths.lance), embedder, settings)
    assert recall(db, settings, "run canal", k=1)[0].sources == [said[0]]
    assert recall(db, settings, "reviewing budgets", k=1)[0].sources == [said[1]]


def test_excluded_turns_are_never_returned(settings, db, embedder, tmp_path):
    said = ingest_history(
        settings,
        db,
        tmp_path,
        ("webchat", "Our cat Miso loves the sunny windowsill."),
        ("webchat", "Miso the cat had her vaccination on Monday."),
    )
    index_episodes(db, VectorStore(settings.paths.lance), embedder, settings)
    hits = recall(db, settings, "Miso the cat", k=5, exclude_sources={said[0]})
    assert said[1] in {s for h in hits for s in h.sources}
    assert said[0] not in {s for h in hits for s in h.sources}


def test_float16_vectors_rank_like_exact_cosine(settings, db, embedder, tmp_path):
    topics = ["flights", "gardening", "jazz concerts", "tax returns", "marathon training", "sourdough"]
    turns = [("webchat", f"Note {i} about {topics[i % 6]}: detail number {i * 7 % 13}.") for i in range(120)]
    ingest_history(settings, db, tmp_path, *turns)
    index_episodes(db, VectorStore(settings.paths.lance), embedder, settings)
    snapshot = vector_store(settings.paths.lance).snapshot(EPISODIC)
    query = embedder.encode(["training for a long run"])[0]
    fast = [row["id"] for row in snapshot.vector_search(query, 10, snapshot.where(), -1.0)]

    rows = VectorStore(settings.paths.lance).table(EPISODIC).to_arrow().to_pylist()
    cosine = {r["id"]: float(np.dot(r["vector"], query)) for r in rows}
    exact = sorted(cosine.values(), reverse=True)
    assert len(fast) == 10
    # float16 may swap near-ties, never pick a clearly worse memory
    assert all(cosine[i] >= exact[9] - 2e-3 for i in fast)
    assert cosine[fast[0]] >= exact[0] - 2e-3
    assert all("marathon" in next(r["text"] for r in rows if r["id"] == i) for i in fast)


def test_a_large_snapshot_scans_sign_bits_and_finds_what_the_full_product_finds(monkeypatch):
    """Above EXACT_BELOW vectors the scan is a Hamming pass over sign bits whose candidates are
    scored exactly. Vectors as sentence embeddings are: topics around a shared direction, and a
    sentence vector or three for a third of the rows. On real vectors (LoCoMo's turns and other text
    among 100,000 rows) 99% of top-50 lists come out the same; here at least 38 in 40 must."""
    import pyarrow as pa

    from cortex_pipelines.memory import snapshot as snapshot_module

    rng = np.random.default_rng(7)
    rows, dims = 30_000, 384

    def unit(x):
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    def noise(n):
        return rng.normal(size=(n, dims)) / np.sqrt(dims)  # about a unit vector's length

    topics = unit(0.5 * unit(rng.normal(size=dims)) + noise(300))
    vectors = unit(topics[rng.integers(0, 300, rows)] + 0.8 * noise(rows))
    with_sentences = np.sort(rng.choice(rows, rows // 3, replace=False))
    counts = rng.integers(1, 4, len(with_sentences))
    sentences = unit(vectors[np.repeat(with_sentences, counts)] + 0.6 * noise(counts.sum()))
    ids = np.arange(1, rows + 1)
    table = Snapshot(
        1,
        pa.table({"id": ids, "text": [f"turn {i}" for i in ids]}),
        ids,
        vectors.astype(np.float16),
        None,
        sentences.astype(np.float16),
        with_sentences,
        np.cumsum(counts) - counts,
    )
    assert len(table) + len(sentences) > snapshot_module.EXACT_BELOW
    near = np.concatenate([vectors[:20], sentences[:20]])
    queries = unit(near + rng.uniform(0.5, 1.2, (40, 1)) * noise(40))
    scanned = [table.vector_search(q, 25, table.where(), 0.2) for q in queries]
    assert table._signs is not None  # the sign pass ran
    monkeypatch.setattr(snapshot_module, "EXACT_BELOW", 10**9)
    full = [table.vector_search(q, 25, table.where(), 0.2) for q in queries]

    def cosines(hits):
        return np.array([row["_cosine"] for row in hits])

    assert all(len(hits) == 25 for hits in full)
    # The same rows; their cosines within float16's rounding (the candidates' products are float16,
    # a small table's float32).
    same = [{r["id"] for r in a} == {r["id"] for r in b} for a, b in zip(scanned, full, strict=True)]
    assert sum(same) >= 38
    assert all(np.allclose(cosines(a), cosines(b), atol=0.01) for a, b in zip(scanned, full, strict=True))


def test_a_detail_in_a_long_turn_is_found_by_its_own_sentence(settings, db, embedder, tmp_path):
    long_turn = (
        "Long day at work, the quarterly meetings ran late and the printer jammed twice. "
        "The train home was packed as usual. "
        "Anyway, on Saturday we adopted a tiny grey kitten from the shelter."
    )
    filler = [
        ("webchat", f"The {w} meeting notes are in the shared drive now.")
        for w in ("budget", "design", "hiring")
    ]
    said = ingest_history(settings, db, tmp_path, ("webchat", long_turn), *filler)
    index_episodes(db, VectorStore(settings.paths.lance), embedder, settings)

    rows = {r["id"]: r for r in VectorStore(settings.paths.lance).table(EPISODIC).to_arrow().to_pylist()}
    assert len(rows[said[0]]["sentence_vectors"]) == 3  # one per sentence of the long turn
    assert rows[said[1]]["sentence_vectors"] == []  # a one-sentence turn has its turn vector only

    query = embedder.encode(["what animal did we adopt"])[0]
    whole = float(np.dot(rows[said[0]]["vector"], query))
    best_sentence = max(float(np.dot(v, query)) for v in rows[said[0]]["sentence_vectors"])
    assert best_sentence > whole + 0.05  # the kitten sentence, not the blurred whole turn
    snapshot = vector_store(settings.paths.lance).snapshot(EPISODIC)
    (hit, *_) = snapshot.vector_search(query, 1, snapshot.where(), -1.0)
    assert hit["id"] == said[0] and hit["_cosine"] == pytest.approx(best_sentence, abs=2e-3)
    assert recall(db, settings, "what animal did we adopt", k=1)[0].sources == [said[0]]


def test_a_new_process_loads_the_saved_snapshot_and_never_trusts_a_damaged_one(
    settings, db, embedder, tmp_path, monkeypatch
):
    said = ingest_history(settings, db, tmp_path, ("webchat", "The spare bike key is in the blue jar."))
    index_episodes(db, VectorStore(settings.paths.lance), embedder, settings)
    built = VectorStore(settings.paths.lance).snapshot(EPISODIC)  # reads LanceDB, saves the copy
    saved = settings.paths.lance.with_name("lance-snapshots") / EPISODIC
    assert [p.name for p in saved.iterdir()] == [f"v{built.version}"]

    def no_reading(*_):
        raise AssertionError("read the LanceDB table instead of the saved copy")

    with monkeypatch.context() as patch:
        patch.setattr(Snapshot, "read", classmethod(no_reading))
        loaded = VectorStore(settings.paths.lance).snapshot(EPISODIC)  # a fresh store: a new process
    query = embedder.encode(["where is the bike key"])[0]
    for snap in (built, loaded):
        assert [r["id"] for r in snap.text_search("bike key", 3, snap.where())] == said
        assert [r["id"] for r in snap.vector_search(query, 3, snap.where(), 0.3)] == said

    (saved / f"v{built.version}" / "vectors.npy").write_bytes(b"\x93NUMPY damaged")
    reread = VectorStore(settings.paths.lance).snapshot(EPISODIC)
    assert [r["id"] for r in reread.vector_search(query, 3, reread.where(), 0.3)] == said
    with monkeypatch.context() as patch:  # and the damaged copy was replaced by a whole one
        patch.setattr(Snapshot, "read", classmethod(no_reading))
        assert len(VectorStore(settings.paths.lance).snapshot(EPISODIC)) == 1

    more = ingest_history(settings, db, tmp_path, ("webchat", "Bike service is booked for Friday."))
    index_episodes(db, VectorStore(settings.paths.lance), embedder, settings)
    newer = VectorStore(settings.paths.lance).snapshot(EPISODIC)
    assert newer.version > built.version and set(newer.ids) == {*said, *more}
    assert [p.name for p in saved.iterdir()] == [f"v{newer.version}"]  # the old copy is gone


def test_the_latest_version_read_from_the_folder_is_lancedbs_through_every_kind_of_commit(
    settings, db, embedder, tmp_path
):
    """A process that finds a saved copy of the latest version never opens LanceDB: the version it
    reads from the manifests' names must be LanceDB's own after every kind of commit, and the
    description kept with the copy what LanceDB says of the table."""
    lance = settings.paths.lance

    def agrees() -> None:
        truth = VectorStore(lance)  # a fresh process's view, from LanceDB
        table = truth.table(EPISODIC)
        assert VectorStore(lance).latest_version(EPISODIC) == table.version
        vector = table.schema.field("vector")
        made = (vector.metadata[b"embedder"].decode(), vector.type.list_size)
        VectorStore(lance).snapshot(EPISODIC)  # saves a copy of this version
        answered = VectorStore(lance)
        answered.table = None  # must not be needed: everything comes from the saved copy
        assert answered.embedded_by(EPISODIC) == made
        assert answered.count(EPISODIC) == table.count_rows()
        assert answered.outdated(EPISODIC, made[0]) is None
        assert (
            answered.outdated(EPISODIC, "another-model")
            == f"its vectors are {made[0]}'s, not another-model's"
        )

    first = ingest_history(
        settings, db, tmp_path, ("webchat", "The boathouse key hangs behind the kitchen door.")
    )
    index_episodes(db, VectorStore(lance), embedder, settings)  # creates the table
    agrees()
    ingest_history(settings, db, tmp_path, ("telegram", "My passport expires in March, renew it soon."))
    index_episodes(db, VectorStore(lance), embedder, settings)  # merge-insert
    agrees()
    VectorStore(lance).update(EPISODIC, first, {"channel": "archive"})
    agrees()
    VectorStore(lance).erase(EPISODIC, first)  # delete, compaction and removal of older versions
    agrees()


PIN_TURNS = (
    ("webchat", "Long day at the gym. My locker PIN is 4417. The showers were cold again."),
    ("webchat", "Remember to buy oat milk and coffee beans on the way home."),
    ("webchat", "The dentist moved my appointment to Thursday afternoon."),
)


def _edit_rows(saved):
    """The attack seen in the wild: the same rows, one answer changed."""
    rows = feather.read_table(saved / "rows.arrow")
    for name in ("text", "search_text"):
        edited = pc.replace_substring(rows.column(name), "4417", "9999")
        rows = rows.set_column(rows.column_names.index(name), name, edited)
    feather.write_feather(rows, saved / "rows.arrow", compression="uncompressed")


def _randomize(saved, name):
    real = np.load(saved / name)
    noise = np.random.default_rng(7).normal(size=real.shape)
    np.save(saved / name, (noise / np.linalg.norm(noise, axis=1, keepdims=True)).astype(real.dtype))


def _swap_bm25_scores(saved):
    scores = np.load(saved / "bm25" / "data.csc.index.npy")
    np.save(saved / "bm25" / "data.csc.index.npy", scores[::-1].copy())


TAMPERING = {
    "rows edited": _edit_rows,
    "vectors randomized": lambda saved: _randomize(saved, "vectors.npy"),
    "sentence vectors randomized": lambda saved: _randomize(saved, "sentence_vectors.npy"),
    "bm25 scores swapped": _swap_bm25_scores,
    "a byte appended": lambda saved: (saved / "sentence_rows.npy").open("ab").write(b"\0"),
    "a stray file": lambda saved: (saved / "bm25" / "extra.npy").write_bytes(b"x"),
    "no manifest": lambda saved: (saved / "manifest.json").unlink(),
}


@pytest.mark.parametrize("tamper", TAMPERING.values(), ids=TAMPERING.keys())
def test_a_tampered_saved_copy_is_never_used_and_is_rebuilt_from_lancedb(
    settings, db, embedder, tmp_path, monkeypatch, tamper
):
    said = ingest_history(settings, db, tmp_path, *PIN_TURNS)
    index_episodes(db, VectorStore(settings.paths.lance), embedder, settings)
    truth = VectorStore(settings.paths.lance).snapshot(EPISODIC)  # read from LanceDB, and saved
    folder = settings.paths.lance.with_name("lance-snapshots") / EPISODIC
    saved = folder / f"v{truth.version}"
    assert truth.sentence_rows is not None and len(truth.sentence_rows) == 1  # the long first turn
    tamper(saved)

    reads = []
    real_read = Snapshot.read.__func__
    monkeypatch.setattr(Snapshot, "read", classmethod(lambda cls, *a: reads.append(a) or real_read(cls, *a)))
    fresh = VectorStore(settings.paths.lance).snapshot(EPISODIC)  # a new process
    assert len(reads) == 1, "the damaged copy was loaded instead of LanceDB"
    _assert_same(fresh, truth)
    query = embedder.encode(["what is my locker PIN"])[0]
    (hit, *_) = fresh.vector_search(query, 1, fresh.where(), 0.0)
    assert hit["id"] == said[0] and "4417" in hit["text"]
    assert [r["id"] for r in fresh.text_search("locker PIN", 1, fresh.where())] == [said[0]]

    assert [p.name for p in folder.iterdir()] == [saved.name]  # replaced by a whole copy...
    _assert_same(Snapshot.load(folder, truth.version), truth)  # ...that verifies and loads
    VectorStore(settings.paths.lance).snapshot(EPISODIC)
    assert len(reads) == 1  # and the next process loads it instead of reading LanceDB


def _assert_same(snapshot: Snapshot, truth: Snapshot) -> None:
    assert snapshot.rows.equals(truth.rows)
    assert np.array_equal(snapshot.vectors, truth.vectors)
    assert np.array_equal(snapshot.sentence_vectors, truth.sentence_vectors)
    assert np.array_equal(snapshot.bm25.scores["data"], truth.bm25.scores["data"])


@pytest.mark.slow
def test_cortex_recall_answers_from_lancedb_when_the_saved_rows_were_edited(tmp_path):
    """The case from issue 13: an edited rows.arrow made `cortex recall` say 9999 for a PIN of 4417."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "ANTHROPIC_", "DAGSTER_"))}
    env["CORTEX_HOME"] = str(home)

    def cortex(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "cortex_pipelines.cli", *args], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc.stdout

    cortex("init")
    for channel, text in PIN_TURNS:
        cortex("send", channel, text, "--sender", "maya")
    cortex("run")
    assert "4417" in cortex("recall", "what is my locker PIN", "--json")
    copies = sorted((home / "lance-snapshots").glob("*/v*"))
    assert copies, "the run saved no recall snapshot"
    for saved in copies:
        _edit_rows(saved)

    answer = cortex("recall", "what is my locker PIN", "--json")
    assert "4417" in answer and "9999" not in answer
    for saved in sorted((home / "lance-snapshots").glob("*/v*")):
        assert b"9999" not in (saved / "rows.arrow").read_bytes()
        Snapshot.load(saved.parent, int(saved.name[1:]))  # whole again


def test_keyword_hits_count_the_query_words_they_say_and_a_widened_search_ranks_as_a_fresh_one(
    settings, db, embedder, tmp_path
):
    """Fusion weighs a keyword hit by the share of the query's words it says, read from the index's
    postings, and recall's widened second search adds only its new words' scores to the first's:
    both must agree with tokenizing the texts again and with searching from scratch."""
    from cortex_pipelines.memory.fusion import stemmed

    said = [
        "Our running club meets at the harbour on Saturday mornings before coffee.",
        "The harbour cafe does the best coffee in town, ask for the oat flat white.",
        "I ran the Lisbon half marathon in April and my knees still remember it.",
        "Saturday's dinner is at my sister's place, she is cooking a mushroom risotto.",
        "Bring running shoes and a rain jacket to the Saturday club, the harbour gets windy.",
        "My sister ran her first marathon in Berlin last autumn.",
    ]
    ingest_history(settings, db, tmp_path, *[("webchat", text) for text in said])
    index_episodes(db, VectorStore(settings.paths.lance), embedder, settings)
    snapshot = vector_store(settings.paths.lance).snapshot(EPISODIC)

    for query in ("saturday running at the harbour", "coffee with my sister", "marathons I ran in April"):
        hits = snapshot.text_search(query, 10, snapshot.where())
        assert hits
        for hit in hits:
            assert hit["_words"] == len(stemmed(query) & stemmed(hit["search_text"])), hit["text"]

        widened = f"{query} risotto windy shoes"
        extended = snapshot.text_search(widened, 10, snapshot.where())
        fresh = VectorStore(settings.paths.lance).snapshot(EPISODIC)  # another process's, never searched
        scratch = fresh.text_search(widened, 10, fresh.where())
        assert [h["id"] for h in extended] == [h["id"] for h in scratch]
        assert [h["_score"] for h in extended] == pytest.approx([h["_score"] for h in scratch], rel=1e-5)
        assert [h["_words"] for h in extended] == [h["_words"] for h in scratch]


def test_cortex_recall_over_a_small_memory_never_imports_torch_nor_lancedb_once_a_copy_is_saved(
    settings, db, embedder, tmp_path
):
    """Importing torch is 2 s of a new process (the first reply after idle is one): below
    EXACT_BELOW vectors recall's products are numpy's, and its query goes through the ONNX export.
    Importing LanceDB is ~0.6 CPU-s of a `cortex recall`, `status` or `forget`: once a process has
    saved its copy of the table's latest version, the next loads it and never imports LanceDB."""
    said = ingest_history(
        settings,
        db,
        tmp_path,
        ("webchat", "The boathouse key hangs behind the kitchen door."),
        ("webchat", "My passport expires in March, renew it soon."),
    )
    index_episodes(db, VectorStore(settings.paths.lance), embedder, settings)
    embedder.encode_query("warm the ONNX export")  # exported once per machine, by this process here

    code = (
        "import sys\n"
        "from cortex_pipelines.cli import app\n"
        "try:\n"
        "    app(['recall', 'where is the boathouse key', '-k', '1', '--json'])\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "print(sorted(m for m in ('torch', 'lancedb') if m in sys.modules))\n"
    )
    env = {**os.environ, "CORTEX_HOME": str(settings.home)}
    imported = []
    for _ in range(2):  # the first reads the table (no copy saved yet), the second loads its copy
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert out.returncode == 0, out.stderr[-2000:]
        *answer, loaded = out.stdout.strip().splitlines()
        assert json.loads("\n".join(answer))[0]["sources"] == [said[0]]  # the key's turn, found
        imported.append(loaded)
    assert imported == ["['lancedb']", "[]"]


def test_cortex_recall_on_a_new_home_answers_without_embedding_the_query(tmp_path):
    """Nothing said yet, nothing to compare a query with: on a new machine, embedding it would start
    the ONNX export for an empty answer (it then failed as the process exited, and said queries
    embed with torch)."""
    home, cache = tmp_path / "home", tmp_path / "cache"
    env = {**os.environ, "CORTEX_HOME": str(home), "XDG_CACHE_HOME": str(cache)}
    run = [sys.executable, "-m", "cortex_pipelines.cli"]
    assert subprocess.run([*run, "init"], env=env, capture_output=True, timeout=120).returncode == 0
    out = subprocess.run(
        [*run, "recall", "where is the boathouse key", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [] and out.stderr == "", out.stderr
    assert not list(cache.glob("**/*.onnx")), "the query was embedded"
