"""The embedder: offline, lazy, batched, on the best device present."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from cortex_pipelines.memory.embedder import DIMENSIONS, Embedder, get_embedder, pick_device


def test_importing_the_definitions_loads_no_model_and_no_torch():
    code = (
        "import sys, cortex_pipelines.definitions\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'lancedb') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_embeddings_are_unit_vectors_and_similar_texts_are_close():
    embedder = get_embedder()
    vecs = embedder.encode(["I prefer window seats", "Window seats are my favourite", "Tax forms are due"])
    assert vecs.shape == (3, DIMENSIONS) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.3


def test_the_model_is_loaded_once_per_process_and_only_on_first_use():
    fresh = Embedder(batch_size=8)
    assert fresh._model is None  # constructing costs nothing
    assert get_embedder() is get_embedder()
    assert fresh.encode([]).shape == (0, DIMENSIONS) and fresh._model is None


def test_model_loads_with_the_network_disabled(monkeypatch, tmp_path):
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise OSError('network disabled in this test')\n"
        "socket.socket.connect = refuse\n"
        "from cortex_pipelines.memory.embedder import Embedder\n"
        "print(Embedder().encode(['offline please']).shape)"
    )
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith(f"(1, {DIMENSIONS})")


def test_device_auto_picks_cpu_without_an_accelerator():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        assert pick_device() == "cuda"
    elif torch.backends.mps.is_available():
        assert pick_device() == "mps"
    else:
        assert pick_device() == "cpu"
    assert pick_device("cpu") == "cpu"


@pytest.mark.gpu
def test_cuda_embeddings_match_cpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    texts = [f"sentence number {i} about memory and retrieval" for i in range(256)]
    cpu = Embedder(device="cpu").encode(texts)
    gpu = Embedder(device="cuda").encode(texts)
    assert np.allclose(cpu, gpu, atol=1e-3)
