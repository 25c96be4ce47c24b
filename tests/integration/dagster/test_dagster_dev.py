"""A real `cortex dev`: the daemon's inbox sensor picks up `cortex send` and a run succeeds; while
that run lingers, the conversation's next messages are answered by it."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus

from cortex_pipelines.storage import Database
from tests.support.dagster_dev import (
    cli,
    cortex_dev,
    free_port,
    graphql,
    process_groups,
    successful_run,
    wait_for,
    wait_until_ended,
)
from tests.support.durability import assert_durable
from tests.support.messages_server import model_held_after

pytestmark = pytest.mark.slow

SENSORS = """{ sensorsOrError(repositorySelector: {repositoryName: "__repository__",
    repositoryLocationName: "cortex_pipelines.definitions"}) {
    ... on Sensors { results { name sensorState { status } } } } }"""


@pytest.mark.soak
def test_cortex_dev_picks_up_a_send_and_stops_cleanly(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_BRAIN_LINGER_SECONDS", "2")  # the run ends soon after its answer
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
        # Stopped as a supervisor or an IDE stops it: SIGINT to its own pid, not its whole group.
        groups = process_groups(proc)
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        wait_until_ended(groups, 30, "every process it started to end")
    assert proc.returncode in (0, 130, -signal.SIGINT), (tmp_path / "dev.log").read_text()[-3000:]


@pytest.mark.soak  # slow edge case, kept out of CI's 30 minutes: pytest -m soak
def test_cortex_dev_started_in_a_scripts_background_stops_on_sigterm(tmp_path):
    """`cortex dev &` in a script inherits SIGINT ignored: SIGTERM, passed on as Ctrl-C, stopped
    nothing, and its seven processes ran on."""
    with cortex_dev(tmp_path / "home", tmp_path / "dev.log", sigint_ignored=True) as (_port, _env, proc):
        groups = process_groups(proc)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
        wait_until_ended(groups, 30, "every process it started to end")


def _replies(home) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((home / "outbox" / "webchat").glob("*.json"))]


def _processing_runs(home) -> list:
    with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        return [r for r in instance.get_runs() if r.job_name == "process_messages"]


@pytest.mark.soak
def test_a_lingering_run_answers_the_conversation_then_ends_after_its_idle_window(tmp_path, monkeypatch):
    linger_s = 25  # outlasts two instance reads and a `cortex send` on a loaded machine
    monkeypatch.setenv("CORTEX_BRAIN_LINGER_SECONDS", str(linger_s))
    home = tmp_path / "home"
    with cortex_dev(home, tmp_path / "dev.log") as (_port, env, _proc):
        cli("send", "webchat", "I prefer window seats on long flights", env=env)
        wait_for(lambda: len(_replies(home)) == 1, 180, "the first reply")
        (run,) = _processing_runs(home)
        assert run.status == DagsterRunStatus.STARTED  # answered, and waiting for more
        (first,) = _session_materializations(home)  # shown in the UI while the run waits
        assert first.asset_materialization.metadata["processed"].value == 1

        cli("send", "webchat", "what did I say about seats?", env=env)
        wait_for(lambda: len(_replies(home)) == 2, 60, "the second reply")
        answered_at = time.monotonic()
        assert [r.run_id for r in _processing_runs(home)] == [run.run_id]  # no new run was launched

        ended = wait_for(
            lambda: [r for r in _processing_runs(home) if r.is_finished], linger_s + 60, "the run to end"
        )
        print(f"the run ended {time.monotonic() - answered_at:.1f}s after its last answer")
        assert [r.status for r in ended] == [DagsterRunStatus.SUCCESS]
        with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
            logs = " ".join(e.user_message for e in instance.all_logs(run.run_id))
        materialized = _session_materializations(home)
        assert "bus #1 " in logs and "bus #2 " in logs  # one run log line per message
        # One materialization per batch of answers and one as the run ends, all from this run,
        # their counts adding up.
        assert {m.run_id for m in materialized} == {run.run_id}
        processed = [m.asset_materialization.metadata["processed"].value for m in materialized]
        assert sorted(processed) == [0, 1, 1]


def _session_materializations(home):
    with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        return instance.fetch_materializations(AssetKey("session_messages"), limit=10).records


@pytest.mark.soak
def test_cortex_run_beside_a_lingering_run_does_not_wait_out_its_idle_window(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_BRAIN_LINGER_SECONDS", "900")
    home = tmp_path / "home"
    with cortex_dev(home, tmp_path / "dev.log") as (_port, env, _proc):
        cli("send", "webchat", "I prefer window seats on long flights", env=env)
        wait_for(lambda: len(_replies(home)) == 1, 180, "the first reply")
        (lingering,) = _processing_runs(home)
        assert lingering.status == DagsterRunStatus.STARTED

        ran = cli("run", env=env, timeout=400)  # far less than the 900 s idle window
        assert f"waiting for run(s) {lingering.run_id[:8]}" in ran.stdout
        (ended,) = _processing_runs(home)
        assert ended.status == DagsterRunStatus.SUCCESS


@pytest.mark.soak
def test_cortex_dev_makes_the_query_encoder_first_and_nothing_it_started_outlives_its_sigkill(
    tmp_path, monkeypatch
):
    """On a machine without the ONNX query encoder, the first reply would wait about 7 s for its
    export: `cortex dev` makes it as it starts, before anything is sent. Killed (OOM, `kill -9`),
    `cortex dev` leaves nothing running: its children are in sessions of their own, out of reach
    of a signal to its group, and the six of them (UI, daemon, code server, gateway, …) had run on
    holding the ports."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("CORTEX_INGEST_API_KEY", "a-test-key-of-20-chars")  # the gateway runs too
    monkeypatch.setenv("CORTEX_GATEWAY_PORT", str(free_port()))
    with cortex_dev(tmp_path / "home", tmp_path / "dev.log") as (_port, _env, proc):
        exports = wait_for(lambda: list((cache / "cortex" / "onnx").glob("*.onnx")), 120, "the ONNX export")
        assert [p.name.split("-")[0] for p in exports] == ["all"]  # all-MiniLM-L6-v2-<digest>.onnx
        groups = process_groups(proc)
        os.kill(proc.pid, signal.SIGKILL)
        wait_until_ended(groups, 60, "every process it started to end")


def test_cortex_dev_says_when_it_cannot_make_the_query_encoder(tmp_path, monkeypatch):
    """An ONNX export that cannot be written (here the cache is a file, not a folder) leaves queries
    to torch: `cortex dev` says so, with why, instead of going quiet about it."""
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    log = tmp_path / "dev.log"
    with cortex_dev(tmp_path / "home", log):
        said = wait_for(
            lambda: [line for line in log.read_text().splitlines() if "query encoder: torch" in line],
            120,
            "cortex dev to say how queries are embedded",
        )
    assert "Not a directory" in said[0] and "warning: queries embed with torch" in said[0], said


def test_sigterm_while_cortex_dev_answers_a_batch_ends_its_run_cleanly_and_loses_nothing(
    tmp_path, monkeypatch
):
    """QA: SIGTERM to `cortex dev` while its run answered a dropped batch failed the run with a
    traceback (DagsterExecutionInterruptedError, or DuckDB's "Query interrupted") and left the
    message being answered in `processing`, its attempt counted, until the next run. Now the run
    succeeds with what it answered, that message is back in the queue as if never tried, and the
    next `cortex run` answers the rest, each message once."""
    home, total, answered_freely = tmp_path / "home", 20, 3
    # The model keeps the fourth request waiting until the stop is over: the stop lands mid-batch
    # however fast the run goes (CI once saw all of a batch answered between a status poll and the
    # signal, and `cortex dev` lets its run work on while Dagster stops).
    with model_held_after(answered_freely) as (server, stopped):
        for name, value in server.cortex_env().items():
            monkeypatch.setenv(name, value)
        try:
            with cortex_dev(home, tmp_path / "dev.log") as (_port, env, proc):
                folder = home / "inbox" / "webchat"
                folder.mkdir(parents=True, exist_ok=True)
                lines = [
                    json.dumps(
                        {"channel": "webchat", "sender": "user", "text": f"note {i}", "external_id": f"m{i}"}
                    )
                    for i in range(total)
                ]
                (folder / ".batch.jsonl.tmp").write_text("\n".join(lines) + "\n")
                (folder / ".batch.jsonl.tmp").rename(folder / "batch.jsonl")
                wait_for(lambda: len(server.requests) > answered_freely, 180, "the run to answer a few")
                groups = process_groups(proc)
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout=120)
                wait_until_ended(groups, 30, "every process it started to end")
        finally:
            stopped.set()
        said = (tmp_path / "dev.log").read_text()
        assert proc.returncode == 0, said[-3000:]
        for trace in ("Traceback", "Stack Trace", "RUN_FAILURE"):
            assert trace not in said, said[-5000:]
        assert {r.status for r in _processing_runs(home)} == {DagsterRunStatus.SUCCESS}
        state = json.loads(cli("status", "--json", env=env).stdout)["bus"]
        assert state["processing"] == 0 and state["failed"] == 0, state
        assert 0 < state["completed"] <= answered_freely, state  # stopped mid-batch

        cli("run", env=env, timeout=400)
    assert_durable(home, Database(home / "cortex.duckdb"), total)  # every message answered once
    with Database(home / "cortex.duckdb").transaction() as con:
        assert con.execute("SELECT max(attempts) FROM bus").fetchone()[0] == 1  # the stop was no attempt


def _run_status(port: int, run_id: str) -> str:
    found = graphql(port, "{ runOrError(runId: " + json.dumps(run_id) + ") { ... on Run { status } } }")
    return found["data"]["runOrError"]["status"]


def _terminate(port: int, run_id: str) -> str:
    """What the UI's Terminate button sends."""
    done = graphql(port, "mutation { terminateRun(runId: " + json.dumps(run_id) + ") { __typename } }")
    return done["data"]["terminateRun"]["__typename"]


def test_a_run_terminated_in_the_ui_shows_canceled_and_loses_nothing(tmp_path, monkeypatch):
    """Terminate in the UI, while the brain waits on the model: the run ended as a SUCCESS, as when
    `cortex dev` stops it, and the user could not tell their Terminate from a run that finished. It
    ends CANCELED now; the message goes back to the queue, its attempt not counted, and the next
    run answers it. Started as a script's `cortex dev &` (SIGINT ignored), as Terminate must stop
    such a run too."""
    monkeypatch.setenv("CORTEX_BRAIN_LINGER_SECONDS", "0")
    home = tmp_path / "home"
    with model_held_after(0) as (server, released):
        for name, value in server.cortex_env().items():
            monkeypatch.setenv(name, value)
        with cortex_dev(home, tmp_path / "dev.log", sigint_ignored=True) as (port, env, _proc):
            cli("send", "webchat", "I prefer window seats on long flights", env=env)
            wait_for(lambda: server.requests, 180, "the brain's call to the model")
            (run,) = _processing_runs(home)
            assert _terminate(port, run.run_id) == "TerminateRunSuccess"
            ended = ("SUCCESS", "FAILURE", "CANCELED")
            wait_for(lambda: _run_status(port, run.run_id) in ended, 60, "the run to end")
            assert _run_status(port, run.run_id) == "CANCELED"
            state = json.loads(cli("status", "--json", env=env).stdout)["bus"]
            assert state == {**state, "pending": 1, "processing": 0, "completed": 0, "failed": 0}

            released.set()  # the model answers again: the message is answered once, by a new run
            wait_for(
                lambda: json.loads(cli("status", "--json", env=env).stdout)["bus"]["completed"] == 1,
                180,
                "the message to be answered by the next run",
            )
    with Database(home / "cortex.duckdb").transaction() as con:
        assert con.execute("SELECT max(attempts) FROM bus").fetchone()[0] == 1  # the Terminate was no attempt
