"""A SIGKILLed run never stops the instance answering (DESIGN.md, "Process model").

The real `cortex run` is SIGKILLed at random moments (while it drains, while it materializes
memory), and a run worker of a real `cortex dev` is SIGKILLed mid-drain. A killed run leaves its
Dagster run record STARTED and its pool slot claimed; the next `cortex run`, or the `cortex dev`
sensors, must notice the dead holder, fail its run, free its slot and answer the rest exactly once.

CI makes 2 kills of `cortex run`; `pytest -m soak` makes 20 (or `CRASH_KILLS=N` kills).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from dagster import DagsterInstance, DagsterRunStatus

from cortex_pipelines.lanes import run_process
from cortex_pipelines.sensors.inbox import inbox_sensor
from cortex_pipelines.storage import Database
from tests.support.dagster_dev import cli, cortex_dev, wait_for
from tests.support.durability import assert_durable, fetch_all
from tests.support.messages_server import model_held_after
from tests.support.sensors import evaluate

pytestmark = pytest.mark.slow

SEED = int(os.environ["CRASH_SEED"])  # drawn once per test run in conftest.py
KILLS = int(os.environ.get("CRASH_KILLS", "2"))


def _inbox_batch(home: Path, count: int, channel: str = "webchat") -> None:
    folder = home / "inbox" / channel
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "channel": channel,
                "sender": "user",
                "text": f"Note {i}: the blue folder number {i} is on shelf {i % 7}.",
                "external_id": f"kill-{i}",
            }
        )
        for i in range(count)
    ]
    tmp = folder / ".batch.jsonl.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(folder / "batch.jsonl")


def _env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "DAGSTER_"))}
    return {**env, "CORTEX_HOME": str(home), "PYTHONUNBUFFERED": "1"}


def _cortex(*args: str) -> list[str]:
    return [sys.executable, "-m", "cortex_pipelines.cli", *args]


def _bus_states(home: Path) -> dict:
    with Database(home / "cortex.duckdb").transaction() as con:
        return dict(fetch_all(con, "SELECT state, count(*) FROM bus GROUP BY state"))


def _runs(home: Path) -> list:
    with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        return list(instance.get_runs())


@pytest.mark.timeout(900)
def test_random_sigkills_of_cortex_run_never_wedge_the_instance(tmp_path):
    rng = random.Random(SEED)
    print(f"CRASH_SEED={SEED} kills={KILLS}")
    home = tmp_path / "home"
    env = _env(home)
    subprocess.run(_cortex("init"), env=env, check=True, capture_output=True)
    total = 120
    _inbox_batch(home, total)

    kills = []
    for n in range(KILLS):
        proc = subprocess.Popen(
            _cortex("run"), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, text=True,
        )
        # Startup (imports, the model) takes several seconds; the drain and the memory assets
        # follow. Kill anywhere in there.
        delay = rng.uniform(4.0, 16.0)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        output = proc.stdout.read()
        kills.append((n, round(delay, 1), proc.returncode, _bus_states(home)))
        assert proc.returncode in (0, -signal.SIGKILL), output
        if n:
            # Each run after a kill must notice the dead holder instead of waiting on it.
            assert "waiting for run" not in output, output
    print("kills (n, after s, rc, bus):", kills)

    started = time.monotonic()
    final = subprocess.run(
        _cortex("run"), env=env, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    elapsed = time.monotonic() - started
    print(f"final cortex run: {elapsed:.1f}s\n{final.stdout[-2000:]}")
    assert final.returncode == 0, final.stdout + final.stderr
    assert "waiting for run" not in final.stdout

    assert_durable(home, Database(home / "cortex.duckdb"), total)
    runs = _runs(home)  # newest first
    statuses = [r.status for r in runs]
    assert set(statuses) <= {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE}, statuses
    assert statuses[0] == DagsterRunStatus.SUCCESS
    assert statuses.count(DagsterRunStatus.FAILURE) <= KILLS
    with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        for pool in ("cortex_brain", "cortex_memory"):
            assert not instance.event_log_storage.get_concurrency_info(pool).active_run_ids


# `cortex run` itself, paused right after Dagster records its run (NOT_STARTED, no event yet):
# the moment a SIGKILL that lands between creating the run and starting it leaves behind.
_PAUSE_AFTER_RUN_CREATED = """
import sys, time
from dagster import DagsterInstance
from cortex_pipelines import cli

create_run = DagsterInstance.create_run_for_job

def create_then_pause(self, *args, **kwargs):
    run = create_run(self, *args, **kwargs)
    print("CREATED", run.run_id, flush=True)
    time.sleep(600)

DagsterInstance.create_run_for_job = create_then_pause
sys.argv = ["cortex", "run"]
cli.app()
"""


def _kill_cortex_run_once_its_run_is_recorded(env: dict) -> str:
    """SIGKILL the real `cortex run` right after Dagster records its run; that run's id."""
    paused = subprocess.Popen(
        [sys.executable, "-c", _PAUSE_AFTER_RUN_CREATED], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    said = []
    while (line := paused.stdout.readline()) and not line.startswith("CREATED "):
        said.append(line)
    os.killpg(paused.pid, signal.SIGKILL)
    paused.wait()
    assert line.startswith("CREATED "), "".join(said)
    return line.split()[1]


@pytest.mark.timeout(300)
def test_a_cortex_run_killed_before_its_run_started_holds_nothing(tmp_path):
    """Killed in that moment, the run stayed NOT_STARTED forever; in the brain lane that reads as
    a run about to answer, so `cortex dev`'s sensor skipped every message after it. The sensor and
    the next `cortex run` now fail it (its process is gone) and answer."""
    home = tmp_path / "home"
    env = _env(home)
    subprocess.run(_cortex("init"), env=env, check=True, capture_output=True)
    _inbox_batch(home, 3)
    run_id = _kill_cortex_run_once_its_run_is_recorded(env)
    with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        assert instance.get_run_by_id(run_id).status == DagsterRunStatus.NOT_STARTED
        _inbox_batch(home, 3, channel="telegram")
        asked = evaluate(inbox_sensor, instance, str(home))
        assert asked.run_requests, asked.skip_reason
        assert instance.get_run_by_id(run_id).status == DagsterRunStatus.FAILURE

    # The same record, found by the next `cortex run` instead of a sensor.
    run_id = _kill_cortex_run_once_its_run_is_recorded(env)
    final = subprocess.run(_cortex("run"), env=env, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-2000:]
    assert f"recovered: run {run_id[:8]} (cortex_main" in final.stdout, final.stdout
    assert _bus_states(home) == {"completed": 6}
    assert {r.status for r in _runs(home)} == {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE}


@pytest.mark.timeout(300)
def test_a_waiting_cortex_run_honours_sigint_and_sigterm(tmp_path):
    """While a live run holds the brain lane, a second `cortex run` waits, and Ctrl-C or SIGTERM
    stops it at once; the first run is untouched and answers everything. One left waiting then
    runs, and prints none of the first run's replies as its own."""
    home, total = tmp_path / "home", 10
    # The model keeps the second request waiting until a third run waits too: the first run
    # outlasts the start-up of the others however fast it answers.
    with model_held_after(1) as (server, all_waiting):
        env = {**_env(home), **server.cortex_env()}
        subprocess.run(_cortex("init"), env=env, check=True, capture_output=True)
        _inbox_batch(home, total)
        first = subprocess.Popen(_cortex("run"), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, start_new_session=True)
        waiting: dict[signal.Signals, subprocess.Popen] = {}
        try:
            wait_for(lambda: _bus_states(home).get("completed", 0) > 0, 120, "the first run to answer")
            waiting = {
                sig: subprocess.Popen(_cortex("run"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True)
                for sig in (signal.SIGINT, signal.SIGTERM)
            }
            for sig, second in waiting.items():
                assert _waits(second), "it never said it was waiting"
                assert first.poll() is None, "the first run ended before the others started waiting"
                sent = time.monotonic()
                second.send_signal(sig)
                second.wait(timeout=60)
                print(f"{sig.name}: stopped in {time.monotonic() - sent:.2f}s with {second.returncode}")
                expected = 130 if sig == signal.SIGINT else -signal.SIGTERM
                assert second.returncode == expected, second.stderr.read()
                if sig == signal.SIGINT:
                    err_lines = second.stderr.read().strip().splitlines()
                    assert err_lines == [
                        "cortex: interrupted while waiting for another run; nothing was started"
                    ]
            patient = subprocess.Popen(
                _cortex("run"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True,
            )
            waiting[signal.SIGCONT] = patient  # killed with the others if the test fails
            said_first = _waits(patient)
            all_waiting.set()
            assert first.wait(timeout=400) == 0, first.stdout.read()
            said, _ = patient.communicate(timeout=300)
            assert patient.returncode == 0, said
            assert said_first, "the last run never waited"
            assert " ← #" not in said, said  # it answered nothing: every reply was the first run's
        finally:
            all_waiting.set()
            for proc in (first, *waiting.values()):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
    assert _bus_states(home) == {"completed": total}


def _waits(run: subprocess.Popen) -> list[str]:
    """The lines a `cortex run` printed up to saying it waits for another run; [] if it ended first."""
    said: list[str] = []
    while line := run.stdout.readline():
        said.append(line)
        if "waiting for run" in line:
            return said
    return []


@pytest.mark.timeout(400)
def test_ctrl_c_stops_an_answering_cortex_run_and_the_next_run_answers_the_rest(tmp_path):
    """Ctrl-C while `cortex run` answers. Polars' runtime, on its first query, took SIGINT below
    Python and never raised it: once a message had been answered the run went on to the end. And
    when Ctrl-C did land it was reported as a failed step ("`cortex doctor` checks the stores")
    with exit 1. Now it stops within seconds with exit 130 and one line saying what is left."""
    home, total, answered_freely = tmp_path / "home", 20, 3
    # The model keeps the fourth request waiting until the run has ended: Ctrl-C lands mid-batch
    # however fast the run goes.
    with model_held_after(answered_freely) as (server, stopped):
        env = {**_env(home), **server.cortex_env()}
        subprocess.run(_cortex("init"), env=env, check=True, capture_output=True)
        _inbox_batch(home, total)
        proc = subprocess.Popen(_cortex("run"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            wait_for(lambda: len(server.requests) > answered_freely, 180, "the run to answer a few")
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
            print(f"stopped {time.monotonic() - sent:.2f}s after SIGINT")
        finally:
            stopped.set()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        said = [line for line in stderr.splitlines() if line.startswith("cortex:")]
        assert proc.returncode == 130, stderr[-3000:]
        assert len(said) == 1 and said[0].startswith("cortex: interrupted: "), said
        assert said[0].endswith("left for the next `cortex run`"), said
        assert 0 < _bus_states(home).get("completed", 0) <= answered_freely

        final = subprocess.run(_cortex("run"), env=env, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-2000:]
    assert_durable(home, Database(home / "cortex.duckdb"), total)


def _run_worker_pid(home: Path) -> tuple[str, int] | None:
    """The process of an in-flight process_messages run of `cortex dev`, once it reported it."""
    with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        for run in instance.get_runs():
            if run.job_name == "process_messages" and run.status == DagsterRunStatus.STARTED:
                found = run_process(instance, run.run_id)
                if found:
                    return run.run_id, found[0]
    return None


def _brain_slot_holders(instance: DagsterInstance) -> set[str]:
    return set(instance.event_log_storage.get_concurrency_info("cortex_brain").active_run_ids)


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.timeout(600)
def test_sigkill_of_a_cortex_dev_run_is_recovered_by_the_sensors(tmp_path, monkeypatch):
    home, total, answered_freely = tmp_path / "home", 20, 5
    # The model keeps the sixth request waiting until the kill: the run is killed mid-batch however
    # fast it goes (under CI load it could otherwise answer all before the kill).
    with model_held_after(answered_freely) as (server, killed):
        for name, value in server.cortex_env().items():
            monkeypatch.setenv(name, value)
        with cortex_dev(home, tmp_path / "dev.log") as (_port, env, _proc):
            _sigkill_a_run_mid_batch(home, env, total, answered_freely, killed)
    assert_durable(home, Database(home / "cortex.duckdb"), total)


def _sigkill_a_run_mid_batch(
    home: Path, env: dict, total: int, answered_freely: int, killed: threading.Event
) -> None:
    """Kill the run worker once it answered a few, then let the model answer again: the sensors
    must fail the dead run, free its slot and start one that answers the rest."""
    _inbox_batch(home, total)
    run_id, pid = wait_for(lambda: _run_worker_pid(home), 180, "a process_messages run worker")
    wait_for(lambda: _bus_states(home).get("completed", 0) >= answered_freely, 120, "the run to answer a few")
    answered = _bus_states(home).get("completed", 0)
    files = list((home / "outbox" / "webchat").glob("*.json"))
    # Replies reach the outbox folder as they commit, not after the whole drain.
    assert len(files) >= answered - 1, (len(files), answered)
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    answered_at_kill = _bus_states(home).get("completed", 0)
    assert answered_at_kill < total
    # SIGKILL is delivered asynchronously: the worker is gone (or a zombie) moments later.
    wait_for(lambda: _dead(pid), 10, "the killed run worker to die")
    killed.set()

    # The sensors notice the dead holder on their next tick (inbox: 5 s, supervision: 60 s),
    # fail its run, free its slot and start a new run; before the fix nothing ever resumed.
    wait_for(
        lambda: _bus_states(home).get("completed", 0) > answered_at_kill + 1,
        120,
        "a new run to answer after the kill",
    )
    resumed_in = time.monotonic() - killed_at

    def all_answered():
        status = json.loads(cli("status", "--json", env=env).stdout)
        return status["bus"]["completed"] == total

    wait_for(all_answered, 300, "every message answered after the kill")
    print(f"killed run {run_id[:8]} (pid {pid}) after {answered_at_kill} answers; answering "
          f"resumed {resumed_in:.1f}s later, all {total} after {time.monotonic() - killed_at:.1f}s")
    with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        dead = instance.get_run_by_id(run_id)
        assert dead.status == DagsterRunStatus.FAILURE
        # The run that answered the rest may still be lingering for more messages, holding the slot.
        assert run_id not in _brain_slot_holders(instance)


@pytest.mark.timeout(600)
def test_sigkill_of_a_lingering_run_leaves_the_next_message_answered(tmp_path, monkeypatch):
    """A run that answered and now lingers for more messages holds the brain lane, its pool slot and
    the lease while it waits; SIGKILLed there, it must not stop the instance answering."""
    monkeypatch.setenv("CORTEX_BRAIN_LINGER_SECONDS", "600")  # it would outlive the test unkilled
    home = tmp_path / "home"
    with cortex_dev(home, tmp_path / "dev.log") as (_port, env, _proc):
        cli("send", "webchat", "the first message", env=env)
        wait_for(lambda: _bus_states(home).get("completed", 0) == 1, 180, "the first answer")
        run_id, pid = wait_for(lambda: _run_worker_pid(home), 30, "the lingering run worker")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _dead(pid), 10, "the killed run worker to die")

        cli("send", "webchat", "the second message", env=env)
        wait_for(lambda: _bus_states(home).get("completed", 0) == 2, 180, "the answer after the kill")
        with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
            assert instance.get_run_by_id(run_id).status == DagsterRunStatus.FAILURE
            assert run_id not in _brain_slot_holders(instance)
            answered_by = [r for r in instance.get_runs() if r.job_name == "process_messages"]
            assert len(answered_by) == 2, [(r.run_id[:8], r.status) for r in answered_by]
    assert_durable(home, Database(home / "cortex.duckdb"), 2)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_soak_twenty_sigkills_of_cortex_run(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "KILLS", 20)
    test_random_sigkills_of_cortex_run_never_wedge_the_instance(tmp_path)
