"""In-memory search copies of the LanceDB tables, for recall.

LanceDB is where embeddings live, durably and shared between processes; but answering a query
from it costs about 20 ms for a full-text search and as much for a vector search at 100,000 rows
on two cores. Recall reads a snapshot instead: the table's unit vectors as one matrix and a BM25
index from bm25s (about 1 ms a query). A small table's cosines are one matrix-vector product; above
EXACT_BELOW vectors a pass over their sign bits picks a few thousand candidates first, and only
those are multiplied (at 100,000 memories of real text, 99% of top-50 lists are the full product's;
in the others a memory within 0.01 of cosine of the last one found is missed). A snapshot is
tagged with the table version it was read at; the store reloads it when the version moves, so a
write by any process is seen by the next query.
Vectors are kept as float16: half the memory (75 MB at 100,000 rows), and the product reads half
the bytes; rounding moves a cosine by about 1e-3. Below EXACT_BELOW vectors, the products are
numpy's over a float32 copy instead, so a process answering from a small memory never imports
torch (2 s of the first reply after idle); the sign pass's candidates go through torch's float16
product, which numpy has no fast one for.

Every Dagster run and CLI command is a fresh process, and building a snapshot takes seconds at
100,000 rows, so the first process to build a version saves it to disk; the others load that copy
in a fraction of the time. A damaged or vanished copy is never trusted: the table is read again.
A copy is whole only as its manifest says: the size and SHA-256 of each of its files, written last.
An edited rows.arrow once changed what recall answered, and random vectors were accepted; now a
copy whose files differ from its manifest in any byte, or that has none, is deleted and rebuilt.
"""

from __future__ import annotations

import hashlib
import io
import json
import mmap
import os
import re
import shutil
import threading
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather

from cortex_pipelines.files import write_atomic
from cortex_pipelines.processes import helper_thread
from cortex_pipelines.text import COMPOUND_HINT, with_compound_words

# Lucene's English list, plus the question words, pronouns and requests of conversation: "when did
# you tell me about my trip" is about a trip. Without them a turn that merely says "when" or "you"
# competes with one about the topic.
STOP_WORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their then there
    these they this to was will with about any can could did do does from had has have how i i'm its me
    my our please remember should so tell them we were what when where which who why would you your
    know some""".split()
)


# Above this many vectors (a row's and its sentences') a query first ranks them all by the Hamming
# distance between sign bits (48 bytes a vector: about 2 ms at 266,359 vectors on two cores, against
# 7-10 ms for the float16 product), then scores the rows of the best SIGN_CANDIDATES exactly.
EXACT_BELOW = 20_000
SIGN_CANDIDATES = 4_000

ROWS_KEPT = 20_000  # rows a snapshot keeps as dicts (about 1 KB each)
MANIFEST = "manifest.json"
NPY_HEADER_MAX = 1 << 16  # what np.save writes for a plain array is a few hundred bytes


class DamagedCopy(ValueError):
    """A saved snapshot that is not exactly what was saved: it is deleted and the table read again."""


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def _write_manifest(folder: Path, version: int, table: dict) -> None:
    """Size and SHA-256 of every file of the copy, and the table's description, written after them
    all (atomically)."""
    files = {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in _files(folder)
    }
    write_atomic(
        folder / MANIFEST, json.dumps({"version": version, "table": table, "files": files}, indent=1)
    )


@dataclass(frozen=True)
class TableDescription:
    """What a version of a table is made of, for the checks every process makes before it searches
    (memory/vectors.py: `embedded_by`, `outdated`, `count`): the model that made its vectors (None
    when the table does not name it), their width, its columns and how many rows it holds."""

    embedder: str | None
    width: int
    columns: frozenset[str]
    rows: int | None = None  # None: not counted


def saved_description(folder: Path, version: int) -> TableDescription | None:
    """The description a saved copy of this version keeps in its manifest, read without the copy's
    files; None when there is no such copy, or it predates descriptions or is unreadable."""
    try:
        manifest = json.loads((folder / f"v{version}" / MANIFEST).read_bytes())
        table = manifest["table"]
        if manifest["version"] != version:
            return None
        return TableDescription(
            table["embedder"], int(table["width"]), frozenset(table["columns"]), int(table["rows"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


class _Verified:
    """The files of a saved copy as its manifest lists them: no file missing or added, and each one
    hashed before it is parsed."""

    def __init__(self, saved: Path, version: int):
        self.saved = saved
        try:
            manifest = json.loads((saved / MANIFEST).read_bytes())
            self.expected = {
                str(name): (int(entry["bytes"]), str(entry["sha256"]))
                for name, entry in manifest["files"].items()
            }
            saved_version = manifest["version"]
        except FileNotFoundError as exc:
            raise DamagedCopy(f"{saved} has no manifest") from exc
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise DamagedCopy(f"{saved} has an unreadable manifest") from exc
        if saved_version != version:
            raise DamagedCopy(f"{saved} says it is version {saved_version}")
        present = {p.relative_to(saved).as_posix() for p in _files(saved)}
        if present != set(self.expected):
            raise DamagedCopy(f"{saved} has other files than its manifest lists")

    def read(self, name: str) -> mmap.mmap | bytes:
        """The file mapped privately (copy on write) and hashed through that mapping, so nothing is
        read twice and what was checked is what recall uses (short of an in-place rewrite after
        loading, which Cortex never does: a copy is replaced by renaming a folder)."""
        size, sha = self.expected[name]
        with (self.saved / name).open("rb") as fh:
            if os.fstat(fh.fileno()).st_size != size:
                raise DamagedCopy(f"{self.saved / name} changed size")
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY) if size else b""
        if hashlib.sha256(data).hexdigest() != sha:
            raise DamagedCopy(f"{self.saved / name} is not what was saved")
        return data

    def read_all(self) -> dict[str, mmap.mmap | bytes]:
        return {name: self.read(name) for name in self.expected}


def _array(files: dict[str, mmap.mmap | bytes], name: str) -> np.ndarray:
    """A verified .npy of the copy, parsed in place (no copy): plain numeric data only, never pickles."""
    data = files[name]
    stream = io.BytesIO(bytes(memoryview(data)[:NPY_HEADER_MAX]))
    major, _ = np.lib.format.read_magic(stream)
    read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran_order, dtype = read_header(stream)
    if fortran_order or dtype.hasobject:
        raise DamagedCopy(f"{name} is not an array this module saves")
    return np.frombuffer(data, dtype, int(np.prod(shape)), stream.tell()).reshape(shape)


@cache
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


# bm25s's default token pattern (scikit-learn's): words of two or more characters.
_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def tokenize(texts: list[str], ids: bool):
    """bm25s tokens: lower case, stop words dropped, Snowball-stemmed. As words (`ids` false: a
    query, a few candidates) without bm25s, whose progress bars and vocabulary cost 0.5 ms a call,
    the same tokens as bm25s.tokenize gives. A run-together name counts as itself and as its words
    ("PureGym": puregym, pure, gym)."""
    if not ids:
        stem = _stemmer().stemWords
        return [
            stem([w for w in _TOKEN.findall(with_compound_words(text).lower()) if w not in STOP_WORDS])
            for text in texts
        ]
    import bm25s

    # A whole table's texts: screened in Arrow for a lower-case letter before a capital, which every
    # run-together name has (44 ms at 100,000 texts, against 230 ms for the name's regex on each).
    hinted = pc.match_substring_regex(pa.array(texts, pa.string()), COMPOUND_HINT).to_pylist()
    texts = [with_compound_words(text) if hint else text for text, hint in zip(texts, hinted, strict=True)]

    return bm25s.tokenize(
        texts, lower=True, stopwords=list(STOP_WORDS), stemmer=_stemmer(), return_ids=ids, show_progress=False
    )


_torch_threads = threading.RLock()


@contextmanager
def _one_thread():
    """torch's products here are small (a few thousand rows): on two busy cores, waking a second
    OpenMP thread for one took 5-15 ms, against 0.15 ms on the calling thread alone."""
    import torch

    with _torch_threads:  # the setting is the process's: two at once could leave it at one for good
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


def _matrix(vectors: pa.FixedSizeListArray) -> np.ndarray:
    """A column of fixed-size float vectors as one float16 matrix."""
    flat = vectors.flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(len(vectors), vectors.type.list_size).astype(np.float16)


def _rounded(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to float16's precision."""
    return values.astype(np.float16).astype(np.float32)


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The k-th largest value: torch's top-k over a large array (0.2 ms against numpy's partition's
    0.8 ms over 100,000), numpy's below EXACT_BELOW, where a process need not import torch (2 s)."""
    if len(values) < EXACT_BELOW:
        return float(np.partition(values, len(values) - k)[len(values) - k])
    import torch

    with _one_thread():
        return torch.topk(torch.from_numpy(values), k, sorted=False).values.min().item()


# Schema metadata naming the model that made a table's vectors (memory/vectors.py writes it).
EMBEDDER_KEY = b"embedder"


@dataclass
class Snapshot:
    """One version of a table: its rows (without vectors), their vectors and a BM25 index."""

    version: int
    rows: pa.Table
    ids: np.ndarray
    vectors: np.ndarray
    bm25: object | None
    # Sentence vectors of the rows that have them, flattened: for each row with any, its position
    # and where its run of sentence vectors starts.
    sentence_vectors: np.ndarray | None = None
    sentence_rows: np.ndarray | None = None
    sentence_starts: np.ndarray | None = None
    _masks: dict = field(default_factory=dict)
    _signs: SignIndex | None = None
    _last_keywords: tuple[list[int], np.ndarray | None] = ([], None)
    _made: dict[int, dict] = field(default_factory=dict)
    _float32: tuple[np.ndarray, np.ndarray | None] | None = None
    _speakers: list[tuple[str | None, str | None]] | None = None
    table_columns: frozenset[str] = frozenset()  # the table's, as read (saved in the manifest)

    @classmethod
    def empty(cls, version: int = -1) -> Snapshot:
        no_vectors = np.zeros((0, 0), dtype=np.float16)
        return cls(version, pa.table({}), np.zeros(0, np.int64), no_vectors, None)

    @classmethod
    def read(cls, table, version: int) -> Snapshot:
        import bm25s

        data = table.to_arrow()
        if data.num_rows == 0:
            return cls.empty(version)
        vectors = _matrix(data.column("vector").combine_chunks())
        sentences = {}
        if "sentence_vectors" in data.column_names:
            lists = data.column("sentence_vectors").combine_chunks()
            counts = lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
            sentences = {
                "sentence_vectors": _matrix(lists.flatten()),
                "sentence_rows": np.flatnonzero(counts),
                "sentence_starts": (np.cumsum(counts) - counts)[counts > 0],
            }
        made_by = (data.schema.field("vector").metadata or {}).get(EMBEDDER_KEY, b"")
        rows = data.drop_columns([c for c in ("vector", "sentence_vectors") if c in data.column_names])
        rows = rows.combine_chunks().replace_schema_metadata({EMBEDDER_KEY: made_by})  # saved with it
        bm25 = bm25s.BM25()
        bm25.index(tokenize(rows.column("search_text").to_pylist(), ids=True), show_progress=False)
        snapshot = cls(version, rows, rows.column("id").to_numpy(), vectors, bm25, **sentences)
        snapshot.table_columns = frozenset(data.column_names)
        return snapshot

    def save(self, folder: Path) -> None:
        """Save this version as `folder/v<version>` (atomically: a temporary folder renamed) and
        drop older versions. Best effort: a failure only means the next process reads the table."""
        if not len(self):
            return
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = folder / f".v{self.version}-{os.getpid()}-{threading.get_ident()}"
        try:
            temporary.mkdir(mode=0o700)
            # One record batch: a take across several copies whole string columns (2.5 ms a take).
            rows = temporary / "rows.arrow"
            feather.write_feather(self.rows, rows, compression="uncompressed", chunksize=len(self))
            np.save(temporary / "vectors.npy", self.vectors)
            if self.sentence_rows is not None:
                np.save(temporary / "sentence_vectors.npy", self.sentence_vectors)
                np.save(temporary / "sentence_rows.npy", self.sentence_rows)
                np.save(temporary / "sentence_starts.npy", self.sentence_starts)
            self.bm25.save(temporary / "bm25")
            _write_manifest(temporary, self.version, self._description())
            temporary.rename(folder / f"v{self.version}")
        except OSError:
            shutil.rmtree(temporary, ignore_errors=True)  # disk full, or another process saved it first
            return
        for old in folder.iterdir():
            stale_temporary = old.name.startswith(".") and time.time() - old.stat().st_mtime > 600
            if old.name != f"v{self.version}" and (old.name.startswith("v") or stale_temporary):
                shutil.rmtree(old, ignore_errors=True)

    @classmethod
    def load(cls, folder: Path, version: int) -> Snapshot:
        """A version saved by `save`; raises (DamagedCopy, OSError, ...) when it is not exactly that."""
        import bm25s

        saved = folder / f"v{version}"
        data = _Verified(saved, version).read_all()
        if "rows.arrow" not in data or "vectors.npy" not in data:
            raise DamagedCopy(f"{saved} is not a whole snapshot")
        sentences = {}
        if "sentence_rows.npy" in data:
            sentences = {
                "sentence_vectors": _array(data, "sentence_vectors.npy"),
                "sentence_rows": _array(data, "sentence_rows.npy"),
                "sentence_starts": _array(data, "sentence_starts.npy"),
            }
        # combined: a copy saved in several record batches would make every take copy whole columns
        rows = feather.read_table(pa.BufferReader(pa.py_buffer(data["rows.arrow"]))).combine_chunks()
        vectors = _array(data, "vectors.npy")
        bm25 = bm25s.BM25.load(saved / "bm25")
        if not len(rows) == len(vectors) == bm25.scores["num_docs"]:
            raise DamagedCopy(f"{saved} is not a whole snapshot")
        snapshot = cls(version, rows, rows.column("id").to_numpy(), vectors, bm25, **sentences)
        described = saved_description(folder, version)
        snapshot.table_columns = described.columns if described else frozenset()
        return snapshot

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def embedder(self) -> str | None:
        """The model that made these vectors; None for a table written before tables named it."""
        return ((self.rows.schema.metadata or {}).get(EMBEDDER_KEY) or b"").decode() or None

    def _description(self) -> dict:
        return {
            "rows": len(self),
            "embedder": self.embedder,
            "width": int(self.vectors.shape[1]),
            "columns": sorted(self.table_columns),
        }

    def where(self, exclude_ids: Iterable[int] = (), **equals: str) -> np.ndarray:
        """A boolean row mask: each named column equals its value, and the id is not excluded."""
        if not len(self):
            return np.ones(0, dtype=bool)
        key = tuple(sorted(equals.items()))
        if key not in self._masks:
            mask = np.ones(len(self), dtype=bool)
            for column, value in key:
                mask &= self.rows.column(column).to_numpy(zero_copy_only=False) == value
            self._masks[key] = mask
        exclude = np.fromiter(exclude_ids, dtype=np.int64)
        if not len(exclude):
            return self._masks[key]
        return self._masks[key] & ~np.isin(self.ids, exclude)

    def speakers(self) -> list[tuple[str | None, str | None]]:
        """The distinct (channel, sender) pairs of the rows."""
        if self._speakers is None:
            pairs = (
                self.rows.select(["channel", "sender"]).group_by(["channel", "sender"]).aggregate([])
                if len(self)
                else pa.table({"channel": [], "sender": []})
            )
            channels, senders = pairs.column("channel").to_pylist(), pairs.column("sender").to_pylist()
            self._speakers = list(zip(channels, senders, strict=True))
        return self._speakers

    def said_by(self, speakers: frozenset[tuple[str | None, str | None]]) -> np.ndarray:
        """A boolean row mask: the row's (channel, sender) is one of `speakers`; kept per set."""
        if not len(self):
            return np.ones(0, dtype=bool)
        key = ("said_by", speakers)
        if key not in self._masks:
            mask = np.zeros(len(self), dtype=bool)
            channels = self.rows.column("channel")
            senders = self.rows.column("sender")
            for channel, sender in speakers:
                same = pc.equal(channels, channel) if channel is not None else pc.is_null(channels)
                said = pc.equal(senders, sender) if sender is not None else pc.is_null(senders)
                mask |= pc.and_(same, said).fill_null(False).to_numpy(zero_copy_only=False)
            self._masks[key] = mask
        return self._masks[key]

    def _top(self, scores: np.ndarray, mask: np.ndarray, k: int, floor: float) -> list[int]:
        """Positions of the k best scores above the floor among the masked rows, best first, of
        equal scores the earlier row first. The k-th best is found first, then only rows at least as
        good are ranked: over the 80,000 rows a common word reaches, gathering them first took 0.8
        ms in all, this 0.5 ms."""
        masked = np.where(mask, scores, -np.inf)
        if k < len(masked):
            kth = _kth_largest(masked, k)
            if kth > floor:
                better, tied = np.flatnonzero(masked > kth), np.flatnonzero(masked == kth)
                above = np.sort(np.concatenate([better, tied[: k - len(better)]]))
                return [int(i) for i in above[np.argsort(-scores[above], kind="stable")]]
        above = np.flatnonzero(masked > floor)  # k or fewer
        return [int(i) for i in above[np.argsort(-scores[above], kind="stable")]]

    def _rows(self, positions: list[int], score_name: str, scores: np.ndarray) -> list[dict]:
        """The rows at these positions as dicts (each a new one), with their score. Rows already
        made are kept: a query's lists share many (the widened search's, its first search's), and
        making one costs about 10 us, most of it its timestamp. The copies are shallow: a caller
        copies a list value (`sources`) before changing it."""
        known = {p: row for p in positions if (row := self._made.get(p)) is not None}
        if missing := [p for p in positions if p not in known]:
            made = dict(zip(missing, self.rows.take(pa.array(missing, pa.int64())).to_pylist(), strict=True))
            if len(self._made) + len(made) > ROWS_KEPT:
                self._made.clear()
            self._made.update(made)
            known.update(made)
        return [{**known[p], score_name: float(scores[p])} for p in positions]

    def _exact(self) -> tuple[np.ndarray, np.ndarray | None]:
        """A small snapshot's vectors as float32, made on first use (16 ms at 20,000), for numpy's
        products: a process that answers from a small memory never imports torch (2 s of a cold
        start). einsum, not BLAS: one thread, none left spinning (1.5 ms at 20,000 vectors)."""
        if self._float32 is None:
            sentences = None if self.sentence_vectors is None else self.sentence_vectors.astype(np.float32)
            self._float32 = (self.vectors.astype(np.float32), sentences)
        return self._float32

    def _sentence_count(self) -> int:
        return 0 if self.sentence_vectors is None else len(self.sentence_vectors)

    def vector_search(self, vector: np.ndarray, k: int, mask: np.ndarray, min_cosine: float) -> list[dict]:
        """Rows by cosine similarity (vectors are unit length; a row's is the best of its own vector's
        and its sentences'), best first, at least min_cosine."""
        query = np.asarray(vector, dtype=np.float32)
        if not len(self) or self.vectors.shape[1] != len(query):
            return []  # another model's vectors: recall checks that first, and says so
        if len(self) + self._sentence_count() < EXACT_BELOW:
            # As torch's float16 product rounds them (the sign pass's): a memory scores alike
            # whether its table is above EXACT_BELOW or not.
            query = _rounded(query)
            vectors, sentence_vectors = self._exact()
            cosine = _rounded(np.einsum("ij,j->i", vectors, query))
            if sentence_vectors is not None:
                by_sentence = _rounded(np.einsum("ij,j->i", sentence_vectors, query))
                best = np.maximum.reduceat(by_sentence, self.sentence_starts)
                cosine[self.sentence_rows] = np.maximum(cosine[self.sentence_rows], best)
        else:
            if self._signs is None:
                self._signs = SignIndex(self)
            cosine = self._signs.cosines(self, query, max(SIGN_CANDIDATES, 40 * k))
        return self._rows(self._top(cosine, mask, k, min_cosine - 1e-9), "_cosine", cosine)

    def document_frequency(self, words: list[str]) -> list[int]:
        """In how many rows each word (stemmed) occurs: 0 for a stop word or an unseen one."""
        if self.bm25 is None:
            return [0] * len(words)
        vocab, starts = self.bm25.vocab_dict, self.bm25.scores["indptr"]  # per token, a run of rows
        ids = [vocab.get(tokens[0]) if tokens else None for tokens in tokenize(words, ids=False)]
        return [0 if i is None else int(starts[i + 1] - starts[i]) for i in ids]

    def most_important(self, k: int, mask: np.ndarray) -> list[dict]:
        """Rows by importance, the newest first among equals: what a question about everything known
        ("what do you know about me?"), which shares no word or meaning with any of it, is shown."""
        positions = np.flatnonzero(mask)
        if not len(positions):
            return []
        importance = self.rows.column("importance").fill_null(0).to_numpy(zero_copy_only=False)
        stated = self.rows.column("stated_at").cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        order = np.lexsort((-stated[positions], -importance[positions]))[:k]
        return self._rows([int(p) for p in positions[order]], "_importance", importance)

    def text_search(self, text: str, k: int, mask: np.ndarray) -> list[dict]:
        """Rows by BM25 over their search text (stemmed, stop words dropped), best first; each says
        how many of the query's distinct words it has (`_words`), which fusion weighs it by."""
        if self.bm25 is None:
            return []
        ids = self.bm25.get_tokens_ids(tokenize([text], ids=False)[0])
        if not ids:
            return []
        scores = self._keyword_scores(ids)
        positions = self._top(scores, mask, k, 0.0)
        found = self._rows(positions, "_score", scores)
        for row, words in zip(found, self._words_said(positions, set(ids)), strict=True):
            row["_words"] = words
        return found

    def _keyword_scores(self, ids: list[int]) -> np.ndarray:
        """BM25 scores of every row; a query that extends the last one (recall's widened second
        search) adds only its new words' to the last scores, as BM25 sums over words."""
        last_ids, last_scores = self._last_keywords
        if last_ids and len(ids) > len(last_ids) and ids[: len(last_ids)] == last_ids:
            scores = last_scores + self.bm25.get_scores_from_ids(ids[len(last_ids) :])
        else:
            scores = self.bm25.get_scores_from_ids(ids)
        self._last_keywords = (ids, scores)
        return scores

    def _words_said(self, positions: list[int], ids: set[int]) -> list[int]:
        """How many of the word ids each row says, from the index's postings (a row's, ascending):
        tokenizing the texts again cost 0.6 ms a search."""
        said = np.zeros(len(positions), dtype=np.int64)
        starts, rows_of = self.bm25.scores["indptr"], self.bm25.scores["indices"]
        rows = np.asarray(positions, dtype=rows_of.dtype)  # else each search copies the postings
        for i in ids:
            postings = rows_of[starts[i] : starts[i + 1]]
            at = np.minimum(np.searchsorted(postings, rows), len(postings) - 1)
            said += postings[at] == rows
        return said.tolist()


class SignIndex:
    """The sign bit of every dimension of a snapshot's vectors (rows', then sentences'), compared with
    a query's by Hamming distance: a cheap first pass whose candidates are then scored exactly. The
    bits are of the vectors less their mean: all-MiniLM-L6-v2's vectors share a direction, and
    without it the bits of many dimensions say little. numpy, not faiss: faiss's OpenMP threads
    spin against everything else on two busy cores, and this pass is a few array operations."""

    def __init__(self, snapshot: Snapshot):
        parts = [snapshot.vectors]
        owners = [np.arange(len(snapshot))]
        if snapshot._sentence_count():
            parts.append(snapshot.sentence_vectors)
            counts = np.diff(np.append(snapshot.sentence_starts, snapshot._sentence_count()))
            owners.append(np.repeat(snapshot.sentence_rows, counts))
        total = sum(len(part) for part in parts)
        self.center = sum(part.sum(axis=0, dtype=np.float32) for part in parts) / total
        self.owner = np.concatenate(owners)
        codes = np.concatenate(
            [
                self._code(part[start : start + 65_536])  # in slices: a boolean copy of all is 100 MB
                for part in parts
                for start in range(0, len(part), 65_536)
            ]
        )
        self.words = list(np.ascontiguousarray(codes.T))  # word by word: numpy's fast axis
        self._lock = threading.Lock()
        self._distance = np.zeros(total, dtype=np.uint16)
        self._xor = np.zeros(total, dtype=np.uint64)
        self._bits = np.zeros(total, dtype=np.uint8)

    def _code(self, vectors: np.ndarray) -> np.ndarray:
        """Sign bits packed into 64-bit words (zero-padded), one row per vector."""
        bits = np.packbits(np.atleast_2d(vectors) > self.center, axis=1)
        padded = np.zeros((len(bits), -(-bits.shape[1] // 8) * 8), dtype=np.uint8)
        padded[:, : bits.shape[1]] = bits
        return padded.view(np.uint64)

    def _distances(self, code: np.ndarray, part: slice) -> np.ndarray:
        """The Hamming distance of each vector of `part` to the query's code, into the reused
        buffer (fresh 2 MB arrays a query cost 0.3 ms in page faults); how many are at each."""
        distance, xor, bits = self._distance[part], self._xor[part], self._bits[part]
        distance[:] = 0
        for words, word in zip(self.words, code, strict=True):
            np.bitwise_xor(words[part], word, out=xor)
            np.add(distance, np.bitwise_count(xor, out=bits), out=distance)
        return np.bincount(distance, minlength=64 * len(self.words) + 1)

    def cosines(self, snapshot: Snapshot, query: np.ndarray, count: int) -> np.ndarray:
        """Each row's cosine to the query, from those of its vectors among the (at least) `count`
        nearest by their bits: every vector within the distance the count-th nearest has. A row with
        none is -inf. The products are the full scan's, in float16, so a row scores alike either way.
        Half the distances, and the sentences' gather, are worked out on a helper thread (numpy
        releases the GIL): recall waits on this pass, and the query's embedding thread is done."""
        import torch

        code = self._code(_rounded(query))[0]  # the bits of the query the products use
        second = slice(len(self.owner) // 2, len(self.owner))
        with self._lock:
            other = helper_thread("cortex-recall-scan").submit(self._distances, code, second)
            at_distance = self._distances(code, slice(0, second.start)) + other.result()
            within = np.searchsorted(np.cumsum(at_distance), min(count, len(self.owner)))
            nearest = np.flatnonzero(self._distance <= within)
        own, sentences = nearest[nearest < len(snapshot)], nearest[nearest >= len(snapshot)]
        if len(sentences):
            chosen = helper_thread("cortex-recall-scan").submit(
                np.take, snapshot.sentence_vectors, sentences - len(snapshot), axis=0
            )
        cosine = np.full(len(snapshot), -np.inf, dtype=np.float32)
        # np.take gathers the rows: torch's index_select of float16 took 8-16 ms here, fancy
        # indexing 1.4 ms, np.take 0.55 ms (4,800 rows)
        query16 = torch.from_numpy(query).to(torch.float16)
        with _one_thread():
            rows = torch.from_numpy(np.take(snapshot.vectors, own, axis=0))
            cosine[own] = torch.mv(rows, query16).float().numpy()
            if len(sentences):
                by_sentence = torch.mv(torch.from_numpy(chosen.result()), query16).float().numpy()
        if len(sentences):
            np.maximum.at(cosine, self.owner[sentences], by_sentence)
        return cosine
