"""A real `cortex dev`: the daemon's inbox sensor picks up `cortex send` and a run succeeds."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.slow

RUNS_QUERY = """{ runsOrError { ... on Runs { results { runId jobName status creationTime } } } }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cortex_pipelines.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_cortex_dev_picks_up_a_send_and_stops_cleanly(tmp_path):
    env = {**os.environ, "CORTEX_HOME": str(tmp_path / "home")}
    env.pop("DAGSTER_HOME", None)
    port = _free_port()
    log = (tmp_path / "dev.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cortex_pipelines.cli", "dev", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def ui_up():
            try:
                return _graphql(port, "{ version }")
            except OSError:
                return None

        _wait(ui_up, 120, "the Dagster UI")
        sensor = _wait(
            lambda: _graphql(
                port,
                """{ sensorsOrError(repositorySelector: {repositoryName:
                "__repository__", repositoryLocationName: "cortex_pipelines.definitions"}) {
                ... on Sensors { results { name sensorState { status } } } } }""",
            ),
            60,
            "sensor list",
        )
        states = {s["name"]: s["sensorState"]["status"] for s in sensor["data"]["sensorsOrError"]["results"]}
        assert states["inbox_sensor"] == "RUNNING"

        sent_at = time.time()
        _cli("send", "webchat", "hello from the test", env=env)

        def finished_run():
            runs = _graphql(port, RUNS_QUERY)["data"]["runsOrError"]["results"]
            done = [r for r in runs if r["jobName"] == "process_messages" and r["status"] == "SUCCESS"]
            return done[0] if done else None

        run = _wait(finished_run, 90, "a successful process_messages run")
        latency = run["creationTime"] - sent_at
        print(f"run created {latency:.1f}s after cortex send")
        assert latency < 60

        status = json.loads(_cli("status", "--json", env=env).stdout)
        assert status["bus"]["completed"] == 1
        assert (tmp_path / "home" / "dagster_home" / "dagster.yaml").exists()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        log.close()
    assert code in (0, 130, -signal.SIGINT), (tmp_path / "dev.log").read_text()[-3000:]
