"""LanceDB: embeddings of every session message (episodic) and every fact (semantic).

LanceDB is embedded (a directory) and its writers use optimistic concurrency, so every write
retries on a commit conflict. Rows are upserted by id, so re-running an indexing step is harmless.
Recall searches in-memory snapshots of these tables (memory/snapshot.py), reloaded when a table's
version moves; LanceDB's own vector search serves the write path (dedupe against active facts).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import threading
import time
import types
import warnings
from collections.abc import Iterable
from datetime import timedelta
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from cortex_pipelines.memory.models import DEFAULT_MODEL
from cortex_pipelines.memory.snapshot import EMBEDDER_KEY, Snapshot, TableDescription, saved_description

os.environ.setdefault("LANCE_LOG", "error")

# A table's folder of versions unchanged for this long has no commit in progress or in the same
# clock tick: its timestamp can stand for its version (file times move in ticks of a few ms).
QUIET_VERSIONS_NS = 1_000_000_000

# LanceDB's compaction rewrites every fragment under a million rows: folding one run's few rows into
# a table of 126,000 rewrote all 200 MB of it, and the old copy stayed for LanceDB's default week
# (the home grew 191 MB per `cortex run` at 60,000 messages). So upkeep compacts once this many small
# fragments have gathered (an append adds one and copies nothing), and keeps older versions an hour.
COMPACT_AT_FRAGMENTS = 16
KEEP_VERSIONS = timedelta(hours=1)

EPISODIC = "episodic"
SEMANTIC = "semantic"
# Tables written before their vectors named a model were all made by the default one.
UNNAMED_EMBEDDER = DEFAULT_MODEL


def schema(name: str, dimensions: int, embedder: str) -> pa.Schema:
    """A table's columns, its vectors `dimensions` wide; the vector column names the model that made
    them, since vectors of two models cannot be compared."""
    vector = pa.list_(pa.float32(), dimensions)
    common = [
        pa.field("id", pa.int64()),
        pa.field("text", pa.string()),
        # What BM25 sees: for an episode, the turn with its speaker and, when another speaker said
        # it, the user turn before it, so a question phrased like the earlier turn still finds the
        # answer; for a fact, its text.
        # An episode's vector embeds only the turn with its speaker: fused with the wider full text,
        # that ranked better on LoCoMo than a vector of both turns.
        pa.field("search_text", pa.string()),
        pa.field("vector", vector, metadata={EMBEDDER_KEY: embedder.encode()}),
        pa.field("channel", pa.string()),
        pa.field("sources", pa.list_(pa.int64())),
        pa.field("category", pa.string()),
        pa.field("importance", pa.float32()),
        pa.field("stated_at", pa.timestamp("us")),
    ]
    if name == SEMANTIC:
        return pa.schema([*common, pa.field("tier", pa.string()), pa.field("status", pa.string())])
    return pa.schema(
        [
            *common,
            pa.field("role", pa.string()),
            pa.field("sender", pa.string()),
            # The same channel's previous user turn, so recall can lift a turn next to a strong hit.
            pa.field("prev_id", pa.int64()),
            # A user turn of several sentences also has a vector per sentence (with its speaker),
            # and its cosine to a query is the best of all of them: a long turn's one vector blurs
            # the detail a question asks about (LoCoMo dev: dense alone R@10 46.6 -> 53.8 with both).
            pa.field("sentence_vectors", pa.list_(vector)),
        ]
    )


COLUMNS = {name: set(schema(name, 1, "").names) for name in (EPISODIC, SEMANTIC)}


# lancedb imports model classes from this package, whose __init__ also imports its REST API classes:
# about 370 methods wrapped in pydantic's validate_call, 1.5-2 s of start-up on 2 cores in every
# process that touches memory. Cortex never talks to a REST namespace.
_REST_CLIENT = "lance_namespace_urllib3_client"
_U64_MAX, _I64_MAX = 2**64 - 1, 2**63 - 1


_import_lock = threading.Lock()


def import_lancedb() -> types.ModuleType:
    """Import lancedb with the REST client package's __init__ deferred until something reads one of
    its attributes; its submodules (the models lancedb uses) import as usual."""
    with _import_lock:
        spec = importlib.util.find_spec(_REST_CLIENT)
        if spec is not None and spec.origin and _REST_CLIENT not in sys.modules:
            sys.modules[_REST_CLIENT] = _with_deferred_init(spec)
        import lancedb

    return lancedb


def _with_deferred_init(spec) -> types.ModuleType:
    """The package, with its __init__ run in place the first time one of its attributes is read."""
    package = types.ModuleType(spec.name)
    package.__spec__, package.__loader__, package.__file__ = spec, spec.loader, spec.origin
    package.__package__, package.__path__ = spec.name, list(spec.submodule_search_locations or [])
    # The hook stays until the init has run, so another thread's lookup waits here for it; the
    # init's own lookups (same thread) pass the re-entrant lock and find what is defined so far.
    init_lock = threading.RLock()
    started = threading.Event()

    def run_deferred_init(name: str):
        with init_lock:
            if not started.is_set():
                started.set()
                spec.loader.exec_module(package)
                del package.__getattr__
        try:
            return package.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {spec.name!r} has no attribute {name!r}") from None

    package.__getattr__ = run_deferred_init
    return package


def _conflict(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(word in text for word in ("conflict", "retryable", "concurrent", "commit"))


_retry_commit = retry(
    retry=retry_if_exception(_conflict),
    wait=wait_random_exponential(multiplier=0.05, max=2),
    stop=stop_after_attempt(8),
    reraise=True,
)


class VectorStore:
    """Connection and table handles are reused; reads always see the latest committed version
    (read_consistency_interval=0), so another process's writes are never missed."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._conn = None
        self._tables: dict[str, object] = {}
        self._snapshots: dict[str, Snapshot] = {}
        self._quiet_versions: dict[str, tuple[int, int]] = {}
        self._snapshot_lock = threading.Lock()

    def _db(self):
        if self._conn is None:
            lancedb = import_lancedb()
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._conn = lancedb.connect(str(self.path), read_consistency_interval=timedelta(0))
        return self._conn

    def table(self, name: str):
        """Open a table (the first upsert creates it)."""
        if name not in self._tables:
            self._tables[name] = self._db().open_table(name)
        return self._tables[name]

    def exists(self, name: str) -> bool:
        """A table's folder on disk: asking LanceDB to list its tables costs ~35 ms, and recall asks
        on every message while the tables are not created yet."""
        return name in self._tables or (self.path / f"{name}.lance").is_dir()

    def latest_version(self, name: str) -> int | None:
        """The table's latest committed version, from the names of its manifests (Lance commits a
        version by writing `_versions/<n>.manifest`, n = 2^64 - 1 - version, or n = version in the
        older naming), without importing lancedb: ~0.6 CPU-s, the largest part of a `cortex recall`,
        `status` or `forget` (a `cortex run` imports it anyway: its memory assets write the tables).
        None when there are no such names."""
        try:
            names = os.listdir(self.path / f"{name}.lance" / "_versions")
        except OSError:
            return None
        found = [
            int(stem)
            for stem, dot, ext in (n.partition(".") for n in names)
            if ext == "manifest" and stem.isdigit()
        ]
        return max((_U64_MAX - n if n > _I64_MAX else n for n in found), default=None)

    def _saved_description(self, name: str) -> TableDescription | None:
        """The description kept with the saved snapshot of the table's latest version, if any."""
        version = self.latest_version(name)
        return None if version is None else saved_description(self._saved_snapshots(name), version)

    def _described(self, name: str) -> TableDescription:
        """The table's model, width and columns: from the saved snapshot of its latest version when
        there is one (no lancedb needed), else from its schema."""
        if (saved := self._saved_description(name)) is not None:
            return saved
        schema = self.table(name).schema
        vector = schema.field("vector")
        named = (vector.metadata or {}).get(EMBEDDER_KEY)
        return TableDescription(
            named.decode() if named else None, vector.type.list_size, frozenset(schema.names)
        )

    def embedded_by(self, name: str) -> tuple[str, int] | None:
        """The model that made a table's vectors, and their width; None when there is no table."""
        if not self.exists(name):
            return None
        described = self._described(name)
        return described.embedder or UNNAMED_EMBEDDER, described.width

    def outdated(self, name: str, embedder: str) -> str | None:
        """Why a table must be rebuilt from DuckDB, if it must: it predates a column, or another
        model made its vectors (a changed `embedding_model`). By name: learning a model's width
        may mean loading it, and every `cortex forget` asks."""
        if not self.exists(name):
            return None
        described = self._described(name)
        made = described.embedder or UNNAMED_EMBEDDER
        if made != embedder:
            return f"its vectors are {made}'s, not {embedder}'s"
        if COLUMNS[name] - described.columns:
            return "it predates its current columns"
        return None

    def _saved_snapshots(self, name: str) -> Path:
        return self.path.with_name(self.path.name + "-snapshots") / name

    def drop(self, name: str) -> None:
        self._tables.pop(name, None)
        self._snapshots.pop(name, None)
        # A re-created table numbers its versions from 1 again: no saved copy may stand for them.
        shutil.rmtree(self._saved_snapshots(name), ignore_errors=True)
        if self.exists(name):
            self._db().drop_table(name)

    def count(self, name: str, where: str | None = None) -> int:
        if not self.exists(name):
            return 0
        if where is None and (saved := self._saved_description(name)) is not None and saved.rows is not None:
            return saved.rows
        return self.table(name).count_rows(where)

    @_retry_commit
    def upsert(self, name: str, rows: list[dict], embedder: str) -> None:
        """Insert or replace rows by id; the first rows create the table, as wide as their vectors,
        named for the embedder that made them."""
        if not rows:
            return
        if not self.exists(name):
            made = schema(name, len(rows[0]["vector"]), embedder)
            self._tables[name] = self._db().create_table(name, schema=made, exist_ok=True)
        data = pa.Table.from_pylist(rows, schema=self.table(name).schema)
        (
            self.table(name)
            .merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(data)
        )

    @_retry_commit
    def update(self, name: str, ids: Iterable[int], values: dict) -> None:
        ids = [int(i) for i in ids]
        if ids and self.exists(name):
            self.table(name).update(where=f"id IN ({', '.join(map(str, ids))})", values=values)

    def ids(self, name: str, where: str | None = None) -> set[int]:
        if not self.exists(name):
            return set()
        query = self.table(name).search().select(["id"]).limit(None)
        if where:
            query = query.where(where)
        return {row["id"] for row in query.to_arrow().to_pylist()}

    def texts_and_vectors(self, name: str, ids: Iterable[int]) -> dict[int, tuple[str, np.ndarray]]:
        """The stored text and vector of each row with one of these ids."""
        ids = list(ids)
        if not ids or not self.exists(name):
            return {}
        query = self.table(name).search().where(_id_list(ids)).select(["id", "text", "vector"])
        rows = query.limit(None).to_list()
        return {r["id"]: (r["text"], np.asarray(r["vector"], dtype=np.float32)) for r in rows}

    def active_fact_vectors(self) -> tuple[list[dict], np.ndarray]:
        """Every active fact's id, channel and category, and its vector as the same row of one
        matrix: what maintenance and dedupe compare pairwise."""
        made = self.embedded_by(SEMANTIC)
        if made is None:
            return [], np.zeros((0, 0), dtype=np.float32)
        query = self.table(SEMANTIC).search().where("status = 'active'")
        table = query.select(["id", "vector", "channel", "category"]).limit(None).to_arrow()
        rows = table.select(["id", "channel", "category"]).to_pylist()
        vectors = table.column("vector").to_pylist()  # none once every fact is forgotten or superseded
        return rows, np.array(vectors, dtype=np.float32).reshape(len(rows), made[1])

    def vector_search(self, name: str, vector, k: int, where: str | None = None) -> list[dict]:
        if not self.exists(name):
            return []
        query = self.table(name).search(list(map(float, vector))).distance_type("cosine").limit(k)
        if where:
            query = query.where(where, prefilter=True)
        return query.to_list()

    def snapshot(self, name: str) -> Snapshot:
        """The table as recall searches it, as of its latest committed version. Asking LanceDB for
        the version costs 0.3 ms alone and up to 5 ms beside the query's embedding on two busy
        cores; a folder of versions that has been quiet since the last answer has none new."""
        if not self.exists(name):
            return Snapshot.empty()
        with self._snapshot_lock:
            current = self._snapshots.get(name)
            quiet = self._versions_quiet_since(name)
            if current is not None and quiet is not None and self._quiet_versions.get(name) == quiet:
                return current
            version = self.latest_version(name)
            if version is None or not (self._saved_snapshots(name) / f"v{version}").is_dir():
                version = self.table(name).version  # the table is read: LanceDB says which version
            if current is None or current.version != version:
                current = self._snapshots[name] = self._load_or_read(name, version)
            self._quiet_versions.pop(name, None)
            if quiet is not None:  # looked at before the version was read: a later commit changes it
                self._quiet_versions[name] = quiet
            return current

    def _versions_quiet_since(self, name: str) -> tuple[int, int] | None:
        """The folder of a table's versions (its inode and modification time) when it has not
        changed for QUIET_VERSIONS_NS, else None: a commit adds a file there, which moves the time."""
        try:
            stat = (self.path / f"{name}.lance" / "_versions").stat()
        except OSError:
            return None
        if time.time_ns() - stat.st_mtime_ns < QUIET_VERSIONS_NS:
            return None
        return stat.st_ino, stat.st_mtime_ns

    def _load_or_read(self, name: str, version: int) -> Snapshot:
        """The version as another process saved it, else read from the table and saved. Tagged
        with the version seen before reading: a commit in between only means one more reload."""
        saved = self._saved_snapshots(name)
        if (saved / f"v{version}").is_dir():
            try:
                return Snapshot.load(saved, version)
            except (OSError, ValueError, KeyError, EOFError):
                # Damaged, or removed while loading: read the table and save a whole copy.
                shutil.rmtree(saved / f"v{version}", ignore_errors=True)
        snapshot = Snapshot.read(self.table(name), version)
        snapshot.save(saved)
        return snapshot

    @_retry_commit
    def ensure_vector_index(self, name: str, min_rows: int) -> bool:
        """An ANN index for LanceDB's own vector search once the table is large enough to pay."""
        table = self.table(name)
        if table.count_rows() < min_rows or any(
            ix.index_type.startswith("IVF") for ix in table.list_indices()
        ):
            return False
        table.create_index(metric="cosine", vector_column_name="vector", replace=True)
        return True

    @_retry_commit
    def erase(self, name: str, ids: Iterable[int], changes: dict[int, dict] | None = None) -> int:
        """Delete rows so that no file under the table keeps them, and change others ({id: {column:
        value}}); returns how many rows were deleted. A deleted row stays in its data file, behind a
        deletion vector, until the whole file goes, and compaction rewrites a file only when over a
        tenth of it is deleted: so every other row of each file that held one is rewritten, in the
        same commit, and every older version is removed, with the files of commits that failed
        (a retried upsert leaves one): no other process may be writing the table meanwhile."""
        if not self.exists(name):
            return 0
        table, gone, changes = self.table(name), {int(i) for i in ids}, changes or {}
        located = table.search().select(["id", "_rowaddr"]).limit(None).to_arrow().to_pylist()
        files = {r["_rowaddr"] >> 32 for r in located if r["id"] in gone}
        gone &= {r["id"] for r in located}
        rewrite = {r["id"] for r in located if r["_rowaddr"] >> 32 in files} - gone | set(changes)
        rows = table.search().where(_id_list(rewrite)).limit(None).to_arrow() if rewrite else None
        if rows is not None and changes:
            changed = pc.is_in(rows.column("id"), pa.array(list(changes), pa.int64()))
            edited = [{**row, **changes[row["id"]]} for row in rows.filter(changed).to_pylist()]
            rows = pa.concat_tables(
                [rows.filter(pc.invert(changed)), pa.Table.from_pylist(edited, schema=rows.schema)]
            )
        if rows is not None and rows.num_rows:
            merge = table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
            if gone:
                merge = merge.when_not_matched_by_source_delete(_id_list(gone))
            merge.execute(rows)
        elif gone:
            table.delete(_id_list(gone))
        with warnings.catch_warnings():  # "other processes' readers of older versions fail": accepted
            warnings.simplefilter("ignore")
            table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
        self._snapshots.pop(name, None)
        shutil.rmtree(self._saved_snapshots(name), ignore_errors=True)  # copies of versions with the rows
        return len(gone)

    @_retry_commit
    def optimize(self, name: str) -> bool:
        """Compact fragments, fold new rows into the indexes and remove versions over KEEP_VERSIONS
        old, once COMPACT_AT_FRAGMENTS small fragments have gathered (scheduled, not per write);
        whether it did. Meanwhile a search reads the new rows unindexed, and recall reads its
        snapshot, not the fragments."""
        if not self.exists(name):
            return False
        table = self.table(name)
        if table.stats()["fragment_stats"]["num_small_fragments"] < COMPACT_AT_FRAGMENTS:
            return False
        table.optimize(cleanup_older_than=KEEP_VERSIONS)
        return True


def _id_list(ids: Iterable[int]) -> str:
    return f"id IN ({', '.join(str(int(i)) for i in sorted(ids))})"


@cache
def vector_store(path: Path) -> VectorStore:
    """One store (and its open handles) per LanceDB folder and process."""
    return VectorStore(path)
