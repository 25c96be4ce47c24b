"""One `cortex dev` per home. A second one started on a home whose `cortex dev` runs (a second
terminal, `make dev` twice) ran a second Dagster daemon on the same instance (two sensor loops
over one DuckDB file), whether its UI port was taken or not, and when stopped wiped the live one's
daemon reports: `cortex doctor --restore` then restored under the live instance. It now refuses
before starting anything; a SIGKILLed `cortex dev` leaves nothing that stops the next one. Through
the real `cortex` CLI and real `cortex dev` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from cortex_pipelines.processes import DEV_MARK, end_processes, left_by_earlier_dev
from cortex_pipelines.storage import dagster_sqlite
from tests.support.cli import cli_argv, cli_env, cortex
from tests.support.dagster_dev import (
    alive_in,
    cortex_dev,
    free_port,
    graphql,
    process_groups,
    wait_for,
    wait_until_ended,
)

pytestmark = pytest.mark.timeout(600)
REFUSAL_TIMEOUT_S = 60


def _another_dev(home: Path, port: int) -> subprocess.CompletedProcess[str]:
    """`cortex dev --port PORT` on `home`, expected to exit by itself; one that keeps running is
    stopped as Ctrl-C stops it, and fails the test."""
    proc = subprocess.Popen(
        cli_argv("dev", "--port", str(port)),
        env=cli_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=REFUSAL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        groups = process_groups(proc)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=90)
        for process in alive_in(groups):
            with suppress(psutil.Error):
                process.kill()
        pytest.fail(
            f"a second `cortex dev` ran for {REFUSAL_TIMEOUT_S} s beside the first\n"
            f"--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
        )
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _ui_answers(port: int) -> bool:
    try:
        return bool(graphql(port, "{ version }"))
    except OSError:
        return False


def test_a_second_cortex_dev_on_a_live_home_refuses_and_leaves_the_first_serving(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    dagster_home = home / "dagster_home"
    with cortex_dev(home, tmp_path / "dev.log") as (port, _, first):
        wait_for(
            lambda: dagster_sqlite.daemon_last_reported(dagster_home) is not None,
            120,
            "the Dagster daemon's first report",
        )
        for second_port in (port, free_port()):  # its UI's port taken, and another one
            second = _another_dev(home, second_port)
            assert second.returncode == 2, second.stdout + second.stderr
            assert second.stdout == ""  # nothing started: not even the UI's address
            assert second.stderr.splitlines() == [
                f"cortex: `cortex dev` is already running in this home (pid {first.pid}, UI "
                f"http://127.0.0.1:{port}): stop it, or set another CORTEX_HOME"
            ]

        assert first.poll() is None
        assert _ui_answers(port)
        ago = dagster_sqlite.daemon_last_reported(dagster_home)
        assert ago is not None and ago < 90  # not wiped by the second one
        refused = cortex("doctor", "--restore", "--yes", home=home, check=False)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith(f"cortex: `cortex dev` is running in this home (pid {first.pid}, UI "), line

        # Without a report (wiped, or not yet made), the live `cortex dev` still stops a restore.
        dagster_sqlite.clear_daemon_reports(dagster_home)
        refused = cortex("doctor", "--restore", "--yes", home=home, check=False)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stderr.startswith("cortex: `cortex dev` is running in this home"), refused.stderr
        assert first.poll() is None


def test_a_cortex_dev_killed_by_sigkill_leaves_its_home_free_at_once(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    killed: set[int] = set()
    try:
        with cortex_dev(home, tmp_path / "killed.log") as (port, _, first):
            killed = process_groups(first)
            os.killpg(first.pid, signal.SIGKILL)  # its children, in sessions of their own, get SIGTERM
            first.wait()
            # Right away, on the same port: the user's restart.
            with cortex_dev(home, tmp_path / "again.log", port=port) as (_, _, again):
                wait_until_ended(killed, 60, "the killed `cortex dev`'s children to end")
                wait_for(lambda: _ui_answers(port), 60, "the new `cortex dev`'s UI")
                assert again.poll() is None
                third = _another_dev(home, free_port())
                assert third.returncode == 2, third.stdout + third.stderr
                assert f"(pid {again.pid}, UI http://127.0.0.1:{port})" in third.stderr
            assert "address already in use" not in (tmp_path / "again.log").read_text()
    finally:
        for process in alive_in(killed):
            with suppress(psutil.Error):
                process.kill()


def test_servers_a_killed_dagster_dev_left_running_are_stopped_by_the_next_cortex_dev(tmp_path):
    """A `dagster dev` that ends before telling its webserver and daemon to stop (SIGTERMed by the
    kernel as its `cortex dev` was SIGKILLed, at a moment it could only print "Aborted!") left both
    running: they end only when told, not when their shutdown pipe closes. The webserver kept the
    UI's port and a second daemon ran on the instance. The watcher `cortex dev` starts ends them
    (next test); with the watcher gone too (`pkill -9 python`), the next `cortex dev` stops them,
    says so, and comes up on the same port."""
    home = tmp_path / "home"
    cortex("init", home=home)
    with cortex_dev(home, tmp_path / "first.log") as (port, _, first):
        children = psutil.Process(first.pid).children()
        (dagster_dev,) = [p for p in children if "dagster" in p.cmdline()]
        (watcher,) = [p for p in children if "-c" in p.cmdline()]
        left = {os.getpgid(dagster_dev.pid)}
        servers = dagster_dev.children()
        watcher.kill()
        dagster_dev.kill()  # no shutdown message for its servers
        first.wait(60)  # `cortex dev` ends with its `dagster dev`
        assert servers and all(s.is_running() for s in servers)  # what the next one meets
    try:
        told = cortex("status", home=home)  # the only place they show until the next `cortex dev`
        assert "dev      not running" in told.stdout, told.stdout
        assert "cortex: a killed `cortex dev` left running: pid " in told.stderr, told.stderr
        assert "(dagster_webserver)" in told.stderr and "(dagster._daemon)" in told.stderr, told.stderr
        with cortex_dev(home, tmp_path / "again.log", port=port) as (_, _, again):
            wait_until_ended(left, 60, "the servers the killed `dagster dev` left")
            wait_for(lambda: _ui_answers(port), 60, "the new `cortex dev`'s UI")
            assert again.poll() is None
            now = json.loads(cortex("status", "--json", home=home).stdout)["dev"]
            assert now["running"].startswith(f"pid {again.pid}, UI http://") and not now["left_behind"], now
        said = (tmp_path / "again.log").read_text()
        assert "cortex: stopping what an earlier `cortex dev` here left running: pid " in said, said
        assert "(dagster_webserver)" in said and "(dagster._daemon)" in said, said
        assert "address already in use" not in said
    finally:
        for process in alive_in(left):
            with suppress(psutil.Error):
                process.kill()


def test_what_a_sigkilled_cortex_dev_started_ends_without_waiting_for_the_next_one(tmp_path):
    """`cortex dev` and its `dagster dev` SIGKILLed together (the OOM killer, `kill -9` on both):
    nothing tells the webserver and daemon to stop, and they served the home headless, the UI's
    port held and sensors ticking, until the next `cortex dev` there. The watcher `cortex dev`
    starts for its own end ends them at once; `cortex status` then names nothing."""
    home = tmp_path / "home"
    cortex("init", home=home)
    killed: set[int] = set()
    try:
        with cortex_dev(home, tmp_path / "killed.log") as (_, _, first):
            (dagster_dev,) = [p for p in psutil.Process(first.pid).children() if "dagster" in p.cmdline()]
            killed = {os.getpgid(dagster_dev.pid)}
            servers = dagster_dev.children()
            os.killpg(first.pid, signal.SIGKILL)
            dagster_dev.kill()
            first.wait()
            assert servers
            wait_until_ended(killed, 60, "the servers of the killed `cortex dev`")
        told = cortex("status", home=home)
        assert "dev      not running" in told.stdout and "left running" not in told.stderr, told.stderr
    finally:
        for process in alive_in(killed):
            with suppress(psutil.Error):
                process.kill()


def test_only_processes_a_cortex_dev_started_on_this_home_count_as_its_leftovers(tmp_path):
    """What a `cortex dev` takes for an earlier one's leftovers: processes carrying the mark it sets
    in `dagster dev`'s environment, on this DAGSTER_HOME; never a `dagster dev` someone runs by
    hand (no mark), nor one of another home."""
    home = tmp_path / "dagster_home"
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    base = {**os.environ, "DAGSTER_HOME": str(home)}
    started = {
        "ours": subprocess.Popen(sleeper, env={**base, DEV_MARK: "1"}),
        "by hand": subprocess.Popen(sleeper, env=base),
        "another home": subprocess.Popen(sleeper, env={**base, DEV_MARK: "1", "DAGSTER_HOME": str(tmp_path)}),
    }
    try:
        wait_for(lambda: all(psutil.Process(p.pid).environ() for p in started.values()), 10, "the sleepers")
        found = {process.pid: program for process, program in left_by_earlier_dev(home)}
        assert found == {started["ours"].pid: Path(sys.executable).name}
        end_processes([psutil.Process(started["ours"].pid)], grace_s=10.0)
        assert not psutil.pid_exists(started["ours"].pid)  # ended and reaped
        assert started["by hand"].poll() is None and started["another home"].poll() is None
    finally:
        for proc in started.values():
            proc.kill()
            proc.wait()
