"""A Cortex process that SIGKILLs itself at a chosen point (helper for the crash tests).

    python tests/support/crash_worker.py HOME KILL_POINT N [CALL]

HOME is a CORTEX_HOME. The worker kills itself with SIGKILL (no cleanup, no finally blocks, no
atexit). Tests start it with run_worker().

Brain points (test_crash_durability): the worker drains the bus with the offline LLM and dies on
the N-th message it processes:

  before_llm                 inside client.complete, before the offline client is asked
  after_llm                  after the offline client answered, before complete() returns
  before_commit              in Brain._commit (inside the open transaction), before any write
  mid_commit                 in Brain._commit right after bus.mark_completed, before COMMIT
  after_commit               right after Brain._process returned (the commit is durable)
  between_outbox_and_export  as the export of the N-th message's reply starts (committed, no file)
  mid_export                 after the N-th message's reply file was written, before it is
                             marked exported

For before_llm/after_llm, CALL (default 1) picks which LLM call of that message: a message that
used a tool makes two, so "before_llm N 2" dies after the tool ran and before the second call.

Ingest points (reliability/test_crash_ingest): one inbox pass (ingest_inbox) that dies

  ingest_before_insert       after every file was read and validated, before the bus insert
  ingest_mid_insert          after the bus insert, inside its open transaction
  ingest_after_commit        after the insert committed, once N good files were archived (N=0:
                             before the first move)
  ingest_mid_reject          between moving the N-th bad file to .rejected and writing its
                             .error note

LanceDB points (reliability/test_crash_lancedb): index_episodes (episodic_*), sync_facts
(semantic_*) or extract_new_facts (extraction_*, offline), with HashEmbedder, dying

  episodic_before_upsert     as the N-th batch's LanceDB write starts
  episodic_after_upsert      after the N-th batch's LanceDB write committed, before its cursor
  semantic_after_upsert      after the facts' LanceDB write committed, before mark_indexed
  extraction_after_upsert    after the N-th semantic write committed (2: the new facts), before
                             mark_indexed and the extraction cursor
  episodic_timer, semantic_timer
                             N milliseconds after the CALL-th LanceDB write started, wherever the
                             process is then (a write, the index build, DuckDB, or done and waiting)

Exit status: killed by SIGKILL (-9 to the parent) when the point was reached; 3 when the work
finished without reaching it.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

KILL_POINTS = (
    "before_llm",
    "after_llm",
    "before_commit",
    "mid_commit",
    "after_commit",
    "between_outbox_and_export",
    "mid_export",
)
# Points at which the killed message is still 'processing' (the next drain recovers it).
MID_MESSAGE = frozenset({"before_llm", "after_llm", "before_commit", "mid_commit"})
# Points inside the outbox export that follows the N-th message's commit.
EXPORT_POINTS = frozenset({"between_outbox_and_export", "mid_export"})
INGEST_POINTS = ("ingest_before_insert", "ingest_mid_insert", "ingest_after_commit", "ingest_mid_reject")
LANCEDB_POINTS = (
    "episodic_before_upsert",
    "episodic_after_upsert",
    "semantic_after_upsert",
    "extraction_after_upsert",
    "episodic_timer",
    "semantic_timer",
)
WORKER = Path(__file__).resolve()
REPO = WORKER.parents[2]


def die(reason: str) -> None:
    sys.stderr.write(f"crash_worker: SIGKILL {reason}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


_STARTED = time.monotonic()


def mark(event: str) -> None:
    """A progress line with the time since start, so a test can tell where a timer kill landed."""
    sys.stderr.write(f"crash_worker: {(time.monotonic() - _STARTED) * 1000:.0f} ms {event}\n")
    sys.stderr.flush()


def run_worker(
    home: Path, point: str, n: int, call: int = 1, extra_env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the worker as a real process and check that it died by SIGKILL at `point`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORTEX_")}
    env["CORTEX_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra_env or {})
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(home), point, str(n), str(call)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,  # a loaded CI machine once took over 60 s
    )
    assert proc.returncode == -signal.SIGKILL, (
        f"worker {point} n={n} call={call} exited {proc.returncode}, not by SIGKILL\n"
        f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
    )
    assert f"SIGKILL {point}" in proc.stderr, proc.stderr
    return proc


class HashEmbedder:
    """Unit vectors drawn from a hash of the text: the LanceDB crash tests need writes, not meaning,
    and loading the real model would cost every killed process seconds."""

    dimensions = 384

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(self.dimensions)
            out[i] = vector / np.linalg.norm(vector)
        return out

    encode_batch = encode  # what the memory assets call


class CountingClient:
    """Wraps the offline client, counts calls, and dies at before_llm/after_llm."""

    def __init__(self, inner, state: dict, kill_point: str, n: int, call: int):
        self.inner = inner
        self.provider, self.model = inner.provider, inner.model
        self.reads_conversation = inner.reads_conversation
        self.state, self.kill_point, self.n, self.call = state, kill_point, n, call
        self.calls = 0

    def _armed(self, point: str) -> bool:
        return (
            self.kill_point == point
            and self.state["message_no"] == self.n
            and self.state["calls_this_message"] == self.call
        )

    def complete(self, request):
        self.calls += 1
        self.state["calls_this_message"] += 1
        if self._armed("before_llm"):
            die(f"before_llm message={self.n} call={self.call} bus_id={self.state['bus_id']}")
        response = self.inner.complete(request)
        if self._armed("after_llm"):
            die(f"after_llm message={self.n} call={self.call} bus_id={self.state['bus_id']}")
        return response


def install(kill_point: str, n: int, state: dict) -> None:
    """Monkeypatch the commit and export paths for the chosen kill point."""
    from cortex_pipelines.brain import loop
    from cortex_pipelines.storage import bus
    from cortex_pipelines.storage import outbox as outbox_store

    original_process = loop.Brain._process
    original_commit = loop.Brain._commit

    def process(self, msg, report):
        state["message_no"] += 1
        state["calls_this_message"] = 0
        state["bus_id"] = msg.id
        result = original_process(self, msg, report)
        if kill_point == "after_commit" and state["message_no"] == n:
            die(f"after_commit message={n} bus_id={msg.id}")
        return result

    def commit(self, con, msg, *args, **kwargs):
        if kill_point == "before_commit" and state["message_no"] == n:
            die(f"before_commit message={n} bus_id={msg.id}")
        return original_commit(self, con, msg, *args, **kwargs)

    loop.Brain._process = process
    loop.Brain._commit = commit

    if kill_point == "mid_commit":
        original_mark = bus.mark_completed

        def mark_completed(con, bus_id):
            original_mark(con, bus_id)
            if state["message_no"] == n:
                die(f"mid_commit message={n} bus_id={bus_id} (transaction still open)")

        bus.mark_completed = mark_completed  # loop calls it as bus.mark_completed

    if kill_point == "between_outbox_and_export":
        original_export = outbox_store.export_files

        def export_files(con, paths):
            if state["message_no"] == n:
                die(f"between_outbox_and_export after {n} message(s)")
            return original_export(con, paths)

        loop.outbox.export_files = export_files

    if kill_point == "mid_export":
        original_write = outbox_store.write_atomic

        def write_atomic(path, content):
            original_write(path, content)
            if state["message_no"] == n:
                die(f"mid_export after writing {Path(path).name}")

        outbox_store.write_atomic = write_atomic


def ingest_pass(home: str, kill_point: str, n: int) -> None:
    """One inbox pass with the kill point patched into it."""
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.ingest import inbox
    from cortex_pipelines.storage import Database

    enqueue_rows, archive, write_note = inbox.enqueue_rows, inbox._archive, inbox.write_atomic
    moved = {"archived": 0, "rejected": 0}

    def enqueue(con, rows, source):
        if kill_point == "ingest_before_insert":
            die(f"ingest_before_insert: {len(rows)} row(s) validated, none inserted")
        result = enqueue_rows(con, rows, source)
        if kill_point == "ingest_mid_insert":
            die(f"ingest_mid_insert: {len(result.inserted)} row(s) inserted, transaction open")
        return result

    def archive_file(path, settings, channel):
        if kill_point == "ingest_after_commit" and moved["archived"] == n:
            die(f"ingest_after_commit: rows committed, {n} file(s) archived")
        archive(path, settings, channel)
        moved["archived"] += 1

    def note(path, content):
        moved["rejected"] += 1
        if kill_point != "ingest_mid_reject" or moved["rejected"] != n:
            return write_note(path, content)
        # Die between the two steps of a rejection, in whichever order _reject takes them.
        if not path.with_name(path.name.removesuffix(".error")).exists():
            write_note(path, content)
        die(f"ingest_mid_reject: bad file {n} half rejected (moved xor noted)")

    inbox.enqueue_rows, inbox._archive, inbox.write_atomic = enqueue, archive_file, note
    settings = load_settings(home)
    report = inbox.ingest_inbox(settings, Database(settings.paths.db))
    mark(f"{kill_point} not reached; accepted={report.accepted} files={len(report.files)}")


def lancedb_pass(home: str, kill_point: str, n: int, call: int) -> None:
    """index_episodes, sync_facts or extract_new_facts, with the kill point patched into
    VectorStore.upsert."""
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.memory import pipeline
    from cortex_pipelines.memory.vectors import VectorStore, import_lancedb
    from cortex_pipelines.storage import Database

    import_lancedb()  # up front, so a timer measures LanceDB's work, not its import
    upsert, ensure_vector_index = VectorStore.upsert, VectorStore.ensure_vector_index
    calls = {"upsert": 0}
    timer = kill_point.endswith("_timer")

    def patched_upsert(self, name, rows, embedder):
        calls["upsert"] += 1
        k = calls["upsert"]
        if timer and k == call:
            mark("timer armed")
            threading.Timer(n / 1000, die, [f"{kill_point} {n} ms after LanceDB write {k} began"]).start()
        if kill_point == "episodic_before_upsert" and k == n:
            die(f"episodic_before_upsert: batch {n} ({len(rows)} rows) not written")
        mark(f"upsert {k} of {len(rows)} rows into {name} begins")
        upsert(self, name, rows, embedder)
        mark(f"upsert {k} committed")
        if kill_point.endswith("_after_upsert") and k == n:
            die(f"{kill_point}: upsert {n} ({len(rows)} rows) committed, DuckDB not told")

    def patched_ensure_vector_index(self, name, min_rows):
        mark(f"vector index check on {name} begins")
        built = ensure_vector_index(self, name, min_rows)
        mark(f"vector index check committed: {built}")
        return built

    VectorStore.upsert, VectorStore.ensure_vector_index = patched_upsert, patched_ensure_vector_index
    settings = load_settings(home)
    db, store = Database(settings.paths.db), VectorStore(settings.paths.lance)
    if kill_point.startswith("episodic"):
        done = pipeline.index_episodes(db, store, HashEmbedder(), settings)
    elif kill_point.startswith("extraction"):
        done = len(pipeline.extract_new_facts(db, store, HashEmbedder(), settings, None).new)
    else:
        done = pipeline.sync_facts(db, store, HashEmbedder(), settings)
    mark(f"work done ({done} rows)")
    if timer:
        time.sleep(60)  # the timer kills the process after the work: a valid, if quiet, point


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    points = (*KILL_POINTS, *INGEST_POINTS, *LANCEDB_POINTS)
    if len(args) not in (3, 4) or args[1] not in points:
        sys.exit(f"usage: crash_worker.py HOME {{{'|'.join(points)}}} N [CALL]")
    home, kill_point, n = args[0], args[1], int(args[2])
    call = int(args[3]) if len(args) == 4 else 1
    if kill_point in INGEST_POINTS:
        ingest_pass(home, kill_point, n)
        sys.exit(3)
    if kill_point in LANCEDB_POINTS:
        lancedb_pass(home, kill_point, n, call)
        sys.exit(3)

    from cortex_pipelines.brain.loop import Brain
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.llm.offline import OfflineClient
    from cortex_pipelines.storage import Database

    settings = load_settings(home)
    db = Database(settings.paths.db)
    state = {"message_no": 0, "calls_this_message": 0, "bus_id": None}
    install(kill_point, n, state)
    client = CountingClient(OfflineClient(), state, kill_point, n, call)
    report = Brain(db, settings, client).drain()
    print(
        f"crash_worker: kill point {kill_point} not reached; processed={report.processed} "
        f"llm_calls={client.calls}",
        file=sys.stderr,
    )
    sys.exit(3)


if __name__ == "__main__":
    main()
