"""The embedder: offline, lazy, batched, on the best device present."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

import cortex_pipelines.memory.embedder as embedder_module
from cortex_pipelines.memory.embedder import (
    Embedder,
    get_embedder,
    pick_device,
    resolve_model_path,
    weights_digest,
)
from tests.support.cli import cli_env, cortex

QUESTIONS = [
    "What did Melanie paint last summer?",
    "When is my dentist appointment?",
    "Which restaurant did we book for the anniversary?",
    "How long is the commute to the new office?",
    "Why did you say the Lisbon flight was cancelled?",
    "Who is looking after the cat while I'm away?",
    "How often do I go to PureGym?",  # read as "Pure Gym" by both paths
]


def embedder_source() -> Path:
    return Path(resolve_model_path("all-MiniLM-L6-v2"))


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
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.3


def test_a_name_of_words_run_together_is_read_as_its_words_unless_the_model_knows_it_whole():
    """The vocabulary has no "puregym": read in pieces ("pure", "##gy", "##m"), "I go to PureGym" was
    far from "Which gym am I a member of?" (cosine 0.29); read as "Pure Gym" it is close. A name the
    vocabulary holds whole ("YouTube", "PlayStation") is read as written."""
    embedder = get_embedder()
    said = "I go to PureGym three evenings a week, then PlayStation or YouTube."
    read = "I go to Pure Gym three evenings a week, then PlayStation or YouTube."
    assert embedder.model_texts([said]) == [read]
    question, as_written, as_words = embedder.encode(["Which gym am I a member of?", said, read])
    assert as_written @ as_words > 0.9999
    assert question @ as_written > 0.45, question @ as_written


def test_the_model_is_loaded_once_per_process_and_only_on_first_use():
    fresh = Embedder(batch_size=8)
    assert fresh._model is None  # constructing costs nothing
    assert get_embedder() is get_embedder()
    assert fresh.encode([]).shape == (0, 384) and fresh._model is None  # its width read from its files


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
    assert out.stdout.strip().endswith("(1, 384)")


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


@pytest.mark.gpu
def test_on_a_cuda_machine_queries_still_embed_through_the_onnx_export(monkeypatch, tmp_path, caplog):
    """With the model on the GPU (device auto), the export traced it with a CPU example and failed:
    every process there logged "queries embed with torch" after seconds spent trying (seen on an
    H200 with bench/gpu.py)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    embedder = Embedder()  # auto: the torch model loads on cuda
    reference = embedder.encode(QUESTIONS)
    assert embedder.device == "cuda" and embedder.prepare_queries(), caplog.text
    queries = np.array([embedder.encode_query(q) for q in QUESTIONS])
    assert (queries * reference).sum(axis=1).min() >= 0.999
    assert "queries embed with torch" not in caplog.text
    assert len(list((tmp_path / "cache").rglob("*.onnx"))) == 1


def test_a_query_on_cpu_embeds_through_an_onnx_export_close_to_torch(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    embedder = Embedder(device="cpu")
    reference = embedder.encode(QUESTIONS)
    queries = np.array([embedder.encode_query(q) for q in QUESTIONS])
    cosine = (queries * reference).sum(axis=1)
    assert cosine.min() >= 0.999, cosine
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-4)
    exports = list((tmp_path / "cache" / "cortex" / "onnx").glob("*.onnx"))
    assert [p.name for p in exports] == [f"all-MiniLM-L6-v2-{weights_digest(embedder_source())}.onnx"]

    # A new process finds the export: its first query loads neither torch nor the torch model.
    code = (
        "import sys\n"
        "from cortex_pipelines.memory.embedder import Embedder\n"
        f"vector = Embedder(device='cpu').encode_query({QUESTIONS[0]!r})\n"
        "print(','.join(m for m in ('torch', 'sentence_transformers') if m in sys.modules), vector.shape)"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["(384,)"]


def test_changed_weights_name_another_export_file(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(embedder_source(), copy)
    before = weights_digest(copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert weights_digest(copy) != before


def test_the_weights_are_hashed_once_until_a_file_is_written_again(monkeypatch, tmp_path):
    """Every process that embeds a query names its export by the weights' digest: hashing 90 MB
    each time was 0.1 s of a `cortex recall`."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    copy = tmp_path / "model"
    shutil.copytree(embedder_source(), copy)
    first = weights_digest(copy)
    read = []
    real_file_digest = embedder_module.hashlib.file_digest

    def file_digest(fh, name):
        read.append(fh.name)
        return real_file_digest(fh, name)

    monkeypatch.setattr(embedder_module.hashlib, "file_digest", file_digest)
    assert weights_digest(copy) == first
    assert read == []
    (copy / "config.json").write_text((copy / "config.json").read_text())  # same bytes, written again
    assert weights_digest(copy) == first
    assert str(copy / "model.safetensors") in read


def test_an_export_that_misses_torch_leaves_queries_on_torch(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(embedder_module, "QUERY_MIN_COSINE", 1.01)  # no export reaches it
    embedder = Embedder(device="cpu")
    vector = embedder.encode_query(QUESTIONS[0])
    assert np.array_equal(vector, embedder.encode([QUESTIONS[0]])[0])
    assert "queries embed with torch" in caplog.text
    assert not list((tmp_path / "cache").rglob("*.onnx"))


def test_a_cortex_run_after_a_short_conversation_never_loads_torch(tmp_path):
    """The quick start's path: after a few messages, `cortex run` answers them and materializes
    every memory asset with the ONNX export alone (loading torch was 7 s of its 25 on two cores),
    and the turns and facts it indexed are found by meaning afterwards."""
    home = tmp_path / "home"
    for said in ("I'm allergic to peanuts, so never suggest satay.", "On flights I prefer window seats."):
        cortex("send", "webchat", said, home=home)
    get_embedder().encode_query("warm the ONNX export")  # exported once per machine, as `cortex dev` does
    code = (
        "import sys\n"
        "from cortex_pipelines.cli import app\n"
        "try:\n"
        "    app(['run'])\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "print('torch loaded:', 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(home), timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "torch loaded: False", out.stdout[-2000:]
    assert "'completed': 2, 'failed': 0" in out.stdout, out.stdout[-2000:]

    with duckdb.connect(str(home / "cortex.duckdb"), read_only=True) as con:
        facts = con.execute("SELECT count(*) FROM facts WHERE status = 'active'").fetchone()[0]
    assert facts == 2  # one fact from each statement, embedded too
    hits = json.loads(
        cortex("recall", "what foods must I avoid for dinner", "-k", "3", "--json", home=home).stdout
    )
    assert any("peanuts" in h["text"] for h in hits), hits
