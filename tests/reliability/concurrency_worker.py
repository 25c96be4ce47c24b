"""Processes for test_concurrency: a producer that writes into the inbox as a connector does, and a
Dagster run started as the daemon would start one. CORTEX_HOME and DAGSTER_HOME come from the
environment.

    python -m tests.reliability.concurrency_worker produce CHANNEL N SECONDS
    python -m tests.reliability.concurrency_worker run JOB
    python -m tests.reliability.concurrency_worker materialize ASSET...
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime

TEXTS = (
    "Remember that the design review moved to Thursday.",
    "I booked the window seat for the Lisbon flight.",
    "Good morning!",
    "The budget draft is in the shared folder now.",
    "Dinner with Sam is at the vegetarian place on Friday.",
    "Keep in mind that the client prefers calls after 10.",
)
QUESTION = "Where is the passport renewal form?"  # every 25th message: a memory_query tool round


def message(channel: str, seq: int) -> dict:
    """The seq-th message of a producer; its external id and text carry the sequence number."""
    return {
        "channel": channel,
        "sender": "maya",
        "external_id": f"{channel}-{seq:04d}",
        "text": f"[{seq:04d}] {QUESTION if seq % 25 == 24 else TEXTS[seq % len(TEXTS)]}",
        "timestamp": datetime.now(UTC).isoformat(),
    }


def produce(channel: str, total: int, seconds: float) -> None:
    """Mostly one-message .json files, every fifth write a .jsonl of up to 4, each written
    atomically (temporary name, then rename) like `cortex send`, spread over `seconds` as
    messages arrive from a chat."""
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.files import write_atomic

    folder = load_settings().paths.inbox / channel
    seq = writes = 0
    started = time.monotonic()
    while seq < total:
        time.sleep(max(0.0, started + seconds * seq / total - time.monotonic()))
        writes += 1
        batch = min(4 if writes % 5 == 0 else 1, total - seq)
        rows = [message(channel, seq + i) for i in range(batch)]
        if batch == 1:
            write_atomic(folder / f"{seq:05d}-{os.getpid()}.json", json.dumps(rows[0]))
        else:
            body = "".join(json.dumps(r) + "\n" for r in rows)
            write_atomic(folder / f"{seq:05d}-{os.getpid()}.jsonl", body)
        seq += batch


def _execute(job_name: str | None, assets: list[str] | None = None) -> None:
    from dagster import AssetKey, DagsterInstance

    from cortex_pipelines.definitions import defs

    job = defs.resolve_job_def(job_name) if job_name else defs.resolve_implicit_global_asset_job_def()
    selection = [AssetKey(name) for name in assets] if assets else None
    with DagsterInstance.get() as instance:
        result = job.execute_in_process(instance=instance, raise_on_error=False, asset_selection=selection)
    print(json.dumps({"run_id": result.run_id, "success": result.success}))
    sys.exit(0 if result.success else 1)


def run(job_name: str) -> None:
    _execute(job_name)


def materialize(assets: list[str]) -> None:
    """Assets in one run, as the automation sensor requests them."""
    _execute(None, assets)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "produce":
        produce(args[0], int(args[1]), float(args[2]))
    elif command == "run":
        run(args[0])
    elif command == "materialize":
        materialize(args)
    else:
        sys.exit(f"unknown command {command!r}")
