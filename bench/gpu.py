"""Embeddings on a CUDA GPU against the CPU of the same machine, through the Embedder the memory
assets and recall use: are the vectors the same, and how much faster is indexing?

    python -m bench.gpu [--model PATH] [--texts 20000] [--queries 200] [--json FILE]

indexing  texts/s of `Embedder.encode` (sentence-transformers batches, what `episodic_memory`
          runs for a backfill) on "cpu" and on "cuda", the same texts, median of three runs;
          the CPU run is the baseline, on every core of the machine
same      the smallest cosine and the largest difference between a text's CPU and GPU vectors
query     p50/p95 ms of one query: `encode_query` as recall calls it with device "auto" (the ONNX
          export on one CPU thread when it fits the model), against torch on the GPU, batch of one

Texts are the personal-assistant sets' statements and distractors (bench/data), cycled with a
number so that none repeats. Needs a CUDA device; exits 2 without one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from cortex_pipelines.memory.embedder import Embedder, pick_device
from cortex_pipelines.memory.models import DEFAULT_MODEL

DATA = Path(__file__).parent / "data"


def _rows(name: str) -> list[dict]:
    """A set from bench/data (read here: bench.paraphrase imports the recall stack)."""
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def corpus(count: int) -> list[str]:
    said = [i["statement"] for i in _rows("paraphrase.jsonl")]
    said += [d["text"] for d in _rows("paraphrase_distractors.jsonl")]
    said += [p[key] for p in _rows("updates.jsonl") for key in ("old", "new")]
    return [f"{text} ({n})" for n, text in zip(range(count), itertools.cycle(said), strict=False)]


def texts_per_second(embedder: Embedder, texts: list[str], runs: int = 3) -> tuple[float, np.ndarray]:
    embedder.encode(texts[:256])  # load the model, warm the kernels
    seconds, vectors = [], None
    for _ in range(runs):
        started = time.perf_counter()
        vectors = embedder.encode(texts)
        seconds.append(time.perf_counter() - started)
    return len(texts) / statistics.median(seconds), vectors


def query_ms(encode, queries: list[str]) -> dict:
    for q in queries[:10]:
        encode(q)
    timings = []
    for q in queries:
        started = time.perf_counter()
        encode(q)
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return {"p50": round(timings[len(timings) // 2], 2), "p95": round(timings[int(len(timings) * 0.95)], 2)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a model name or sentence-transformers folder")
    parser.add_argument("--texts", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64, help="as CORTEX_EMBEDDING_BATCH_SIZE")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if pick_device() != "cuda":
        print("bench.gpu: no CUDA device on this machine", file=sys.stderr)
        raise SystemExit(2)
    import torch

    texts = corpus(args.texts)
    cpu_rate, cpu_vectors = texts_per_second(Embedder(args.model, "cpu", args.batch_size), texts)
    cuda = Embedder(args.model, "cuda", args.batch_size)
    cuda_rate, cuda_vectors = texts_per_second(cuda, texts)
    cosines = (cpu_vectors * cuda_vectors).sum(axis=1)
    asked = [i["question"] for i in _rows("paraphrase.jsonl")]
    queries = [f"{asked[i % len(asked)]} ({i})" for i in range(args.queries)]
    auto = Embedder(args.model, "auto", args.batch_size)
    out = {
        "model": args.model,
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "texts": len(texts),
        "batch_size": args.batch_size,
        "indexing_texts_per_s": {"cpu": round(cpu_rate), "cuda": round(cuda_rate)},
        "indexing_speedup": round(cuda_rate / cpu_rate, 1),
        "same": {
            "min_cosine": round(float(cosines.min()), 6),
            "max_abs_difference": float(np.abs(cpu_vectors - cuda_vectors).max()),
        },
        "query_ms": {
            "auto (as recall)": query_ms(auto.encode_query, queries),
            "auto path": "onnx on one cpu thread" if auto.prepare_queries() else "torch on cuda",
            "torch cuda, batch of one": query_ms(lambda q: cuda.encode([q]), queries),
        },
    }
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
