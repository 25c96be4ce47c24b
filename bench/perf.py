"""Performance suite: medians of repeated runs, each beside a baseline measured in the same process.

    python -m bench.perf --json bench/results/perf.json [--quick] [--only run ...]

ingest   sensor ingest of a 50,000-message JSONL file and of 1,000 one-message files, against a bare
         DuckDB INSERT of the same rows
recall   memory_query p50/p95 over 10,000 and 100,000 memories (synthetic messages of one to three
         sentences, random unit vectors: one per memory and one per sentence of a longer one), against
         the plain way (the query through SentenceTransformer.encode, then brute-force numpy cosine over
         the same vectors); two of its parts alone (the query's embedding, the snapshot's vector scan);
         p50/p95 of the brain's auto-recall right after it records a turn, when recall reads DuckDB
         again and the query's vector comes with the turn's (the file holds
         the memories' turns with their stored vectors and a tenth as many facts; the headline
         p50/p95 are of a file no process has written for a while, whose reads recall keeps);
         and the time to build recall's in-memory snapshot of them from LanceDB, and to load the copy a
         new process finds saved
context  context assembly p50/p95 with 100,000 session rows across 20 channels
embed    our embedder over raw SentenceTransformer.encode on the same texts, and sentences/s
run      `cortex run` wall time per message for 200 messages with the offline provider; and a run
         answering one message (start-up, Dagster's bookkeeping, memory), median of 5, against the
         same run with lancedb imported the plain way (its REST client's __init__ run), turn about
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

WORDS = (
    "the a my we our project meeting flight seat window coffee budget design review sprint "
    "client workshop berlin lisbon helios figma prototype deadline call friday monday report "
    "dinner vegetarian passport renew trip japan cowork desk monitor running marathon april "
    "garden tomatoes sister birthday gift book novel painting concert jazz evening morning"
).split()


def sentence(rng: random.Random, lo: int = 8, hi: int = 40) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


def message(rng: random.Random) -> str:
    """A chat message: one to three sentences, 8 to 40 words in all."""
    return " ".join(sentence(rng, 4, 13) for _ in range(rng.randint(1, 3)))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * (len(ordered) - 1) + 0.5))]


def _home(tmp: Path, name: str):
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.instance import init_home
    from cortex_pipelines.storage import Database

    settings = load_settings(tmp / name, llm_provider="offline")
    init_home(settings)
    return settings, Database(settings.paths.db)


def bench_ingest(tmp: Path, reps: int, progress) -> dict:
    import duckdb
    import polars as pl

    from cortex_pipelines.ingest.inbox import ingest_inbox

    rng = random.Random(7)
    now = datetime.now().replace(microsecond=0)
    batch = [
        {
            "channel": "webchat",
            "text": sentence(rng),
            "sender": "maya",
            "external_id": f"m{i}",
            "timestamp": (now - timedelta(seconds=50_000 - i)).isoformat(),
        }
        for i in range(50_000)
    ]
    body = "".join(json.dumps(m) + "\n" for m in batch)
    jsonl, files, bare = [], [], []
    task = progress.add_task("ingest", total=reps)
    for rep in range(reps):
        settings, db = _home(tmp, f"ingest-{rep}")
        (settings.paths.inbox / "webchat").mkdir(parents=True, exist_ok=True)
        (settings.paths.inbox / "webchat" / "batch.jsonl").write_text(body)
        started = time.perf_counter()
        assert ingest_inbox(settings, db).accepted == len(batch)
        jsonl.append(len(batch) / (time.perf_counter() - started))

        settings, db = _home(tmp, f"files-{rep}")
        folder = settings.paths.inbox / "telegram"
        folder.mkdir(parents=True, exist_ok=True)
        for i, m in enumerate(batch[:1000]):
            (folder / f"{i:05d}.json").write_text(json.dumps({**m, "channel": "telegram"}))
        started = time.perf_counter()
        assert ingest_inbox(settings, db).accepted == 1000
        files.append(1000 / (time.perf_counter() - started))

        frame = pl.DataFrame(batch)  # noqa: F841 - read by DuckDB
        con = duckdb.connect(str(tmp / f"bare-{rep}.duckdb"))
        con.execute(
            "CREATE TABLE t (channel VARCHAR, text VARCHAR, sender VARCHAR, external_id VARCHAR, "
            "timestamp VARCHAR)"
        )
        started = time.perf_counter()
        con.execute("INSERT INTO t SELECT channel, text, sender, external_id, timestamp FROM frame")
        bare.append(len(batch) / (time.perf_counter() - started))
        con.close()
        progress.advance(task)
    ours = statistics.median(jsonl)
    return {
        "jsonl_50k_msgs_per_s": round(ours),
        "files_1k_msgs_per_s": round(statistics.median(files)),
        "bare_insert_msgs_per_s": round(statistics.median(bare)),
        "ratio_jsonl_vs_bare": round(ours / statistics.median(bare), 3),
    }


def bench_recall(tmp: Path, sizes: list[int], queries: int, progress) -> dict:
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.memory import tail
    from cortex_pipelines.memory.embedder import embedder_for
    from cortex_pipelines.memory.pipeline import EPISODIC_CURSOR, embedder_id, sentence_lines
    from cortex_pipelines.memory.recall import recall
    from cortex_pipelines.memory.vectors import EPISODIC, VectorStore, vector_store
    from cortex_pipelines.storage import cursors
    from cortex_pipelines.storage.db import SETTLED_S

    embedder = embedder_for(load_settings(tmp, llm_provider="offline"))  # CORTEX_EMBEDDING_MODEL's
    out = {}
    for size in sizes:
        rng = random.Random(size)
        settings, db = _home(tmp, f"recall-{size}")
        vectors = vector_store(settings.paths.lance)
        texts = [message(rng) for _ in range(size)]
        sentences = [len(sentence_lines("maya", text)) for text in texts]
        # Random unit vectors: one per memory, and one per sentence of a memory of several (as indexed).
        matrix = np.random.default_rng(size).normal(size=(size + sum(sentences), embedder.dimensions))
        matrix = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)
        now = datetime.now()
        task = progress.add_task(f"recall: load {size:,} memories", total=size)
        extra = size  # the next sentence vector's row in matrix
        for start in range(0, size, 10_000):
            rows = []
            for i in range(start, min(size, start + 10_000)):
                rows.append(
                    {
                        "id": i + 1,
                        "text": texts[i],
                        "search_text": texts[i],
                        "vector": matrix[i].tolist(),
                        "sentence_vectors": matrix[extra : extra + sentences[i]].tolist(),
                        "channel": "webchat",
                        "sources": [i + 1],
                        "category": "message",
                        "importance": 1.0,
                        "stated_at": now,
                        "role": "user",
                        "sender": "maya",
                        "prev_id": i or None,
                    }
                )
                extra += sentences[i]
            vectors.upsert(EPISODIC, rows, embedder_id(embedder))
            progress.advance(task, len(rows))
        db.run(_as_the_file_of_a_home, size, embedder_id(embedder), embedder.dimensions)
        db.run(cursors.write, EPISODIC_CURSOR, size)
        started = time.perf_counter()
        vectors.snapshot(EPISODIC)  # built from LanceDB, and saved
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        VectorStore(settings.paths.lance).snapshot(EPISODIC)  # what a new process does: load the copy
        saved_load_s = time.perf_counter() - started
        queries_said = [sentence(rng, 5, 12) for _ in range(queries)]
        ours, base, after_write = [], [], []
        qtask = progress.add_task(f"recall: {queries} queries over {size:,}", total=queries)
        recall(db, settings, queries_said[0], k=10)  # warm: model, snapshot, handles
        # Right after a write (the live path: the brain records the turn with its vectors, then
        # recalls, in one burst of transactions), recall reads DuckDB; once no process has written
        # the file for SETTLED_S, it keeps what it read. The brain's auto-recall has the query's
        # vector already, from the encode that gave the turn's (brain/loop.py, _embed).
        asked = [embedder.encode_query(text) for text in queries_said[:50]]
        with db.burst():
            for n, text in enumerate(queries_said[:50]):
                vector = matrix[n]
                turn = db.run(_record_turn, text, embedder_id(embedder), vector, vector[None, :])
                tail.keep_recorded(str(db.path), embedder_id(embedder), turn, text, vector, vector[None, :])
                started = time.perf_counter()
                recall(db, settings, text, k=10, query_vector=asked[n])
                after_write.append((time.perf_counter() - started) * 1000)
        time.sleep(SETTLED_S)
        recall(db, settings, queries_said[0], k=10)  # what it reads from DuckDB, kept
        # Each step in a loop of its own: interleaved, numpy's BLAS threads still spinning after a
        # product slow torch's next embedding (and the other way round) on two cores. The baseline of
        # a query is its embedding plus its brute-force product.
        for text in queries_said:
            started = time.perf_counter()
            recall(db, settings, text, k=10)
            ours.append((time.perf_counter() - started) * 1000)
            progress.advance(qtask)
        qvecs, query_ms, scan_ms = [], [], []
        for text in queries_said:
            started = time.perf_counter()
            qvecs.append(embedder.encode([text])[0])
            base.append((time.perf_counter() - started) * 1000)
        for n, qvec in enumerate(qvecs):
            started = time.perf_counter()
            np.argpartition(-(matrix @ qvec), 10)[:10]
            base[n] += (time.perf_counter() - started) * 1000
        for text in queries_said:
            started = time.perf_counter()
            embedder.encode_query(text)
            query_ms.append((time.perf_counter() - started) * 1000)
        snapshot = vectors.snapshot(EPISODIC)
        said = snapshot.where(role="user")
        for qvec in qvecs:
            started = time.perf_counter()
            snapshot.vector_search(qvec, 50, said, 0.2)
            scan_ms.append((time.perf_counter() - started) * 1000)
        out[str(size)] = {
            "p50": round(statistics.median(ours), 1),
            "p95": round(percentile(ours, 0.95), 1),
            "numpy_p50": round(statistics.median(base), 1),
            "numpy_p95": round(percentile(base, 0.95), 1),
            "ratio_p50": round(statistics.median(ours) / statistics.median(base), 2),
            "ratio_p95": round(percentile(ours, 0.95) / percentile(base, 0.95), 2),
            "query_embedding_p50": round(statistics.median(query_ms), 1),
            "vector_scan_p50": round(statistics.median(scan_ms), 1),
            "after_write_p50": round(statistics.median(after_write), 1),
            "after_write_p95": round(percentile(after_write, 0.95), 1),
            "vectors": len(matrix),
            "snapshot_build_s": round(load_s, 2),
            "snapshot_saved_load_s": round(saved_load_s, 2),
        }
    return out


def _as_the_file_of_a_home(con, size: int, model: str, dimensions: int) -> None:
    """DuckDB as a home with `size` memories has it, for recall's reads right after a write: the
    user turns, with the vectors the brain stored when it recorded them, and a tenth as many facts."""
    con.execute(
        "INSERT INTO session (role, channel, sender, content, ts, metadata) "
        "SELECT 'user', 'webchat', 'maya', 'turn ' || i, now(), '{}' FROM range($n) t(i)",
        {"n": size},
    )
    con.execute(
        "INSERT INTO turn_vectors SELECT id, $model, list_transform(range($d), lambda x: random()::FLOAT), "
        "[list_transform(range($d), lambda x: random()::FLOAT)] FROM session",
        {"model": model, "d": dimensions},
    )
    con.execute(
        "INSERT INTO facts (text, norm_hash, category, importance, sources, channels, origin, stated_at, "
        "created_at, updated_at) SELECT 'fact ' || i, md5(i::VARCHAR), 'preference', 0.5, [i * 10 + 1], "
        "['webchat'], 'extraction', now(), now(), now() FROM range($n) t(i)",
        {"n": size // 10},
    )


def _record_turn(con, text: str, model: str, vector: np.ndarray, sentences: np.ndarray) -> int:
    """A turn recorded with its vectors, as the brain records one (it then keeps the vectors)."""
    from cortex_pipelines.storage import session, turn_vectors

    turn = session.append_owner_note(con, "webchat", "maya", text)
    turn_vectors.record(con, turn, model, vector, sentences)
    return turn


def bench_context(tmp: Path, reps: int, progress) -> dict:
    from cortex_pipelines.brain.context import assemble
    from cortex_pipelines.storage.bus import BusMessage

    settings, db = _home(tmp, "context")
    db.run(
        lambda con: con.execute(
            """
        INSERT INTO session (bus_id, role, channel, sender, content, ts)
        SELECT i, CASE WHEN i % 2 = 0 THEN 'user' ELSE 'assistant' END, 'channel' || (i % 20),
               'maya', repeat('words of a message ', 1 + (i % 12)), now()::TIMESTAMP - to_seconds(100000 - i)
        FROM range(1, 100001) t(i)
        """
        )
    )
    db.run(
        lambda con: con.execute(
            "INSERT INTO conversations SELECT channel, channel, max(ts), 0, NULL, 'foreground' FROM session "
            "GROUP BY channel"
        )
    )
    last = db.query("SELECT max(id) FROM session WHERE channel = 'channel0'")[0][0]
    msg = BusMessage(last, "channel0", "x", "maya", "hello", "normal", None, None, {}, datetime.now(), 1)
    inside, with_open = [], []
    task = progress.add_task("context assembly", total=reps)
    for _ in range(reps):

        def timed(con):
            started = time.perf_counter()
            assemble(con, settings, msg, last)
            return (time.perf_counter() - started) * 1000

        started = time.perf_counter()
        inside.append(db.run(timed))
        with_open.append((time.perf_counter() - started) * 1000)
        progress.advance(task)
    return {
        "p50": round(statistics.median(inside), 1),
        "p95": round(percentile(inside, 0.95), 1),
        "with_connection_open_p50": round(statistics.median(with_open), 1),
        "with_connection_open_p95": round(percentile(with_open, 0.95), 1),
    }


def bench_embed(texts_n: int, reps: int, progress) -> dict:
    import torch

    from cortex_pipelines.memory.embedder import get_embedder

    rng = random.Random(3)
    texts = [sentence(rng) for _ in range(texts_n)]
    ours = get_embedder()
    raw = ours._load()
    ours_s, raw_s = [], []
    task = progress.add_task(f"embed {texts_n} texts", total=reps)
    for _ in range(reps):
        started = time.perf_counter()
        raw.encode(texts, batch_size=ours.batch_size, show_progress_bar=False)
        raw_s.append(texts_n / (time.perf_counter() - started))
        started = time.perf_counter()
        ours.encode(texts)
        ours_s.append(texts_n / (time.perf_counter() - started))
        progress.advance(task)
    return {
        "device": ours.device,
        "ours_sentences_per_s": round(statistics.median(ours_s), 1),
        "raw_sentences_per_s": round(statistics.median(raw_s), 1),
        "ratio": round(statistics.median(ours_s) / statistics.median(raw_s), 3),
        "threads": torch.get_num_threads(),
    }


def bench_run(tmp: Path, messages: int, progress) -> dict:
    settings, _ = _home(tmp, "run")
    source = tmp / "run.jsonl"
    rng = random.Random(5)
    source.write_text(
        "".join(
            json.dumps(
                {"channel": "webchat", "text": sentence(rng), "sender": "maya", "external_id": f"r{i}"}
            )
            + "\n"
            for i in range(messages)
        )
    )
    env = {**os.environ, "CORTEX_HOME": str(settings.home)}
    cli = [sys.executable, "-m", "cortex_pipelines.cli"]
    subprocess.run([*cli, "ingest", str(source)], env=env, check=True, capture_output=True)
    task = progress.add_task(f"cortex run ({messages} messages)", total=1)
    started = time.perf_counter()
    subprocess.run([*cli, "run"], env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    progress.advance(task)
    return {
        "messages": messages,
        "wall_s": round(wall, 1),
        "per_message_s": round(wall / messages, 3),
        **_one_message_runs(env, cli, progress),
    }


# `cortex run`; given "plain", lancedb is imported the plain way first, as before import_lancedb.
_RUN_WITH_IMPORT = """
import sys
if sys.argv[1] == "plain":
    import lancedb
from cortex_pipelines import cli
cli.app(["run"])
"""


def _one_message_runs(env: dict, cli: list[str], progress, reps: int = 5) -> dict:
    """`cortex run` answering one message (start-up, Dagster's bookkeeping, indexing the turn), with
    lancedb imported through import_lancedb and the plain way, turn about."""
    walls: dict[str, list[float]] = {"deferred": [], "plain": []}
    task = progress.add_task("cortex run, one message each", total=2 * reps)
    for i in range(reps):
        for arm, times in walls.items():
            subprocess.run(
                [*cli, "send", "webchat", f"note {i} {arm}"], env=env, check=True, capture_output=True
            )
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", _RUN_WITH_IMPORT, arm], env=env, check=True, capture_output=True
            )
            times.append(time.perf_counter() - started)
            progress.advance(task)
    ours, theirs = statistics.median(walls["deferred"]), statistics.median(walls["plain"])
    return {
        "one_message_run_s": round(ours, 2),
        "one_message_run_plain_lancedb_import_s": round(theirs, 2),
        "one_message_run_ratio": round(ours / theirs, 2),
    }


PARTS = ("ingest", "recall", "context", "embed", "run")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=Path("bench/results/perf.json"))
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and smaller sizes")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=PARTS,
        default=PARTS,
        help="run only these parts (the others keep their figures in --json)",
    )
    args = parser.parse_args(argv)
    console = Console()
    reps = 2 if args.quick else 3
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory(prefix="cortex-perf-") as tmp, Progress(console=console) as progress:
        root = Path(tmp)
        if "ingest" in args.only:
            results["ingest_msgs_per_s"] = bench_ingest(root, reps, progress)
        if "recall" in args.only:
            sizes = [10_000] if args.quick else [10_000, 100_000]
            results["recall_ms"] = bench_recall(root, sizes, 30 if args.quick else 300, progress)
        if "context" in args.only:
            results["context_ms"] = bench_context(root, 10 if args.quick else 30, progress)
        if "embed" in args.only:
            results["embed_ratio"] = bench_embed(1000 if args.quick else 5000, reps, progress)
        if "run" in args.only:
            results["run_overhead_s"] = bench_run(root, 50 if args.quick else 200, progress)
    if set(args.only) != set(PARTS) and args.json.exists():  # a partial run refreshes only its parts
        results = {**json.loads(args.json.read_text()), **results}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    table = Table(title="Cortex performance (medians)")
    table.add_column("measure")
    table.add_column("cortex", justify="right")
    table.add_column("baseline", justify="right")
    table.add_column("ratio", justify="right")
    if ing := results.get("ingest_msgs_per_s"):
        table.add_row(
            "JSONL ingest, msgs/s",
            f"{ing['jsonl_50k_msgs_per_s']:,}",
            f"{ing['bare_insert_msgs_per_s']:,} (bare INSERT)",
            f"{ing['ratio_jsonl_vs_bare']}",
        )
        table.add_row("1,000 files ingest, msgs/s", f"{ing['files_1k_msgs_per_s']:,}", "", "")
    for size, r in results.get("recall_ms", {}).items():
        table.add_row(
            f"recall p50/p95 ms @ {int(size):,}",
            f"{r['p50']} / {r['p95']}",
            f"{r['numpy_p50']} / {r['numpy_p95']} (numpy)",
            f"{r['ratio_p50']} / {r['ratio_p95']}",
        )
        table.add_row(
            f"recall parts p50 ms @ {int(size):,}: query embedding, vector scan",
            f"{r['query_embedding_p50']}, {r['vector_scan_p50']}",
            "",
            "",
        )
        table.add_row(
            f"auto-recall p50/p95 ms @ {int(size):,} right after the brain records a turn (reads DuckDB)",
            f"{r['after_write_p50']} / {r.get('after_write_p95', '-')}",
            "",
            "",
        )
        table.add_row(
            f"recall snapshot build / saved load s @ {int(size):,} ({r['vectors']:,} vectors)",
            f"{r['snapshot_build_s']} / {r['snapshot_saved_load_s']}",
            "",
            "",
        )
    if ctx := results.get("context_ms"):
        table.add_row(
            "context assembly p50/p95 ms",
            f"{ctx['p50']} / {ctx['p95']}",
            f"{ctx['with_connection_open_p50']} / {ctx['with_connection_open_p95']} incl. open",
            "",
        )
    if emb := results.get("embed_ratio"):
        table.add_row(
            f"embedding sentences/s ({emb['device']})",
            f"{emb['ours_sentences_per_s']}",
            f"{emb['raw_sentences_per_s']} (raw)",
            f"{emb['ratio']}",
        )
    if run := results.get("run_overhead_s"):
        table.add_row("cortex run, s per message", f"{run['per_message_s']}", f"{run['wall_s']} s total", "")
        if "one_message_run_s" in run:
            table.add_row(
                "cortex run answering one message, s",
                f"{run['one_message_run_s']}",
                f"{run['one_message_run_plain_lancedb_import_s']} (plain `import lancedb`)",
                f"{run['one_message_run_ratio']}",
            )
    console.print(table)
    return results


if __name__ == "__main__":
    main()
