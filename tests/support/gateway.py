"""Run a real `cortex serve` for tests: free port, temporary CORTEX_HOME, a known key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.dagster_dev import free_port, wait_for

KEY = "gw-test-key-5f0c1d9e8a7b"
AUTH = {"Authorization": f"Bearer {KEY}"}


@contextmanager
def cortex_serve(home: Path, log_path: Path, **env_extra: str):
    """Yield (base url, env, process) of a running `cortex serve`; SIGTERM it afterwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORTEX_")}
    env.update({"CORTEX_HOME": str(home), "CORTEX_INGEST_API_KEY": KEY, **env_extra})
    port = free_port()
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cortex_pipelines.cli", "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def up():
        assert proc.poll() is None, log_path.read_text()
        try:
            return httpx.get(f"{base}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, 60, "the gateway")
        yield base, env, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
