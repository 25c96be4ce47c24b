"""Run a real `cortex dev` for tests: free port, temporary CORTEX_HOME, GraphQL helpers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

RUNS_QUERY = "{ runsOrError { ... on Runs { results { runId jobName status creationTime } } } }"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def cli(*args: str, env: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cortex_pipelines.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def runs(port: int) -> list[dict]:
    return graphql(port, RUNS_QUERY)["data"]["runsOrError"]["results"]


def successful_run(port: int, job: str) -> dict | None:
    done = [r for r in runs(port) if r["jobName"] == job and r["status"] == "SUCCESS"]
    return done[0] if done else None


def process_groups(proc: subprocess.Popen) -> set[int]:
    """The process groups of `proc` and of every process it started, now: `cortex dev` starts
    `dagster dev` and the gateway in sessions of their own."""
    groups = set()
    for process in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
        with suppress(ProcessLookupError):
            groups.add(os.getpgid(process.pid))
    return groups


def alive_in(groups: set[int]) -> list[psutil.Process]:
    """The processes of those groups that still run (a zombie only waits to be reaped)."""
    alive = []
    for process in psutil.process_iter():
        with suppress(OSError, psutil.Error):
            if os.getpgid(process.pid) in groups and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
    return alive


def wait_until_ended(groups: set[int], timeout: float, what: str) -> None:
    """Wait for every process of those groups to end; a timeout names the ones still running."""
    try:
        wait_for(lambda: not alive_in(groups), timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still running: {describe(alive_in(groups))}") from None


def describe(processes: list[psutil.Process]) -> list[str]:
    """pid, state, age and command line of each process (one gone meanwhile says so)."""
    said = []
    for process in processes:
        try:
            age = time.time() - process.create_time()
            said.append(f"{process.pid} {process.status()} {age:.0f}s: {' '.join(process.cmdline())[:200]}")
        except psutil.Error:
            said.append(f"{process.pid} (gone meanwhile)")
    return said


@contextmanager
def cortex_dev(home: Path, log_path: Path, sigint_ignored: bool = False, port: int | None = None):
    """Yield (port, env) of a running `cortex dev`; stop it with Ctrl-C (SIGINT) afterwards.
    sigint_ignored: started as `cortex dev &` in a script, which ignores SIGINT in the job.
    port: its UI's (default: a free one)."""
    env = {**os.environ, "CORTEX_HOME": str(home)}
    env.pop("DAGSTER_HOME", None)
    port = port or free_port()
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cortex_pipelines.cli", "dev", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
    )

    def ui_up():
        try:
            return graphql(port, "{ version }")
        except OSError:
            return None

    try:
        wait_for(ui_up, 120, "the Dagster UI")
        yield port, env, proc
    finally:
        groups = process_groups(proc) if proc.poll() is None else set()
        with suppress(ProcessLookupError):  # a test may have stopped it already
            os.killpg(proc.pid, signal.SIGINT)
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60)
            os.killpg(proc.pid, signal.SIGKILL)
        for process in alive_in(groups):  # whatever of its children's groups is left
            with suppress(psutil.Error):
                process.kill()
        proc.wait()
        log.close()
