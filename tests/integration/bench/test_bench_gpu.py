"""bench.gpu: the CUDA path of the embeddings against the CPU, run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.gpu", *args], capture_output=True, text=True, timeout=900
    )


def test_without_cuda_it_says_so_in_one_line_and_exits_2():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = run_bench()
    assert out.returncode == 2
    assert out.stderr.strip() == "bench.gpu: no CUDA device on this machine"


@pytest.mark.gpu
def test_on_cuda_the_vectors_match_the_cpu_and_queries_use_the_onnx_export(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    figures = tmp_path / "gpu.json"
    out = run_bench("--texts", "512", "--queries", "20", "--json", str(figures))
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(figures.read_text())
    assert result["same"]["min_cosine"] >= 0.999
    assert result["query_ms"]["auto path"] == "onnx on one cpu thread"
