"""A real `cortex dev`: the daemon's inbox sensor picks up `cortex send` and a run succeeds."""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.support.dagster_dev import cli, cortex_dev, graphql, successful_run, wait_for

pytestmark = pytest.mark.slow

SENSORS = """{ sensorsOrError(repositorySelector: {repositoryName: "__repository__",
    repositoryLocationName: "cortex_pipelines.definitions"}) {
    ... on Sensors { results { name sensorState { status } } } } }"""


def test_cortex_dev_picks_up_a_send_and_stops_cleanly(tmp_path):
    home = tmp_path / "home"
    with cortex_dev(home, tmp_path / "dev.log") as (port, env, proc):
        sensors = wait_for(lambda: graphql(port, SENSORS), 60, "sensor list")
        states = {s["name"]: s["sensorState"]["status"] for s in sensors["data"]["sensorsOrError"]["results"]}
        assert states["inbox_sensor"] == "RUNNING" and states["memory_sensor"] == "RUNNING"
        assert states["automation_sensor"] == "RUNNING"  # runs the memory and publish assets

        sent_at = time.time()
        cli("send", "webchat", "hello from the test", env=env)
        run = wait_for(
            lambda: successful_run(port, "process_messages"), 90, "a successful process_messages run"
        )
        latency = run["creationTime"] - sent_at
        print(f"run created {latency:.1f}s after cortex send")
        assert latency < 60
        status = json.loads(cli("status", "--json", env=env).stdout)
        assert status["bus"]["completed"] == 1
        assert (home / "dagster_home" / "dagster.yaml").exists()
    assert proc.returncode in (0, 130, -signal.SIGINT), (tmp_path / "dev.log").read_text()[-3000:]
