"""bench.suite_cpu end to end: a real pytest run whose test starts real `cortex` processes; each one's
CPU time is counted under its command and the test file that started it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.suite_cpu import command_of, summarize

REPO = Path(__file__).resolve().parents[3]

A_TEST_STARTING_CORTEX = """
import subprocess, sys

def test_two_cortex_commands():
    for args in (["--now", "+1h", "--help"], ["--help"]):
        subprocess.run([sys.executable, "-m", "cortex_pipelines.cli", *args], check=True, capture_output=True)
"""


def suite_cpu(tmp_path: Path, test_file: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m bench.suite_cpu` on one test file, with a pytest config of its own (not this repo's)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = tmp_path / "suite_cpu.json"
    pytest_args = ["-c", str(tmp_path / "pytest.ini"), "-p", "no:xdist", "-p", "no:cacheprovider", "-q"]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.suite_cpu", "--json", str(out), "--", *pytest_args, str(test_file)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, json.loads(out.read_text())


def test_every_cortex_process_of_a_test_is_counted_under_its_command_and_file(tmp_path):
    test_file = tmp_path / "test_starts_cortex.py"
    test_file.write_text(A_TEST_STARTING_CORTEX)
    proc, summary = suite_cpu(tmp_path, test_file)
    assert proc.returncode == 0 and summary["pytest_exit_status"] == 0, proc.stdout + proc.stderr
    help_runs = summary["by_command"]["cortex --help"]
    assert help_runs["processes"] == 2 and help_runs["cpu_s"] > 0  # --now and its value are not the command
    started_here = [f for f in summary["by_test_file"] if f.endswith("test_starts_cortex.py")]
    assert len(started_here) == 1 and summary["by_test_file"][started_here[0]] >= help_runs["cpu_s"]
    assert "processes logged" in proc.stdout and "cortex --help" in proc.stdout


def test_a_failing_suite_fails_the_bench_with_its_figures_written(tmp_path):
    test_file = tmp_path / "test_fails.py"
    test_file.write_text("def test_fails():\n    assert False\n")
    proc, summary = suite_cpu(tmp_path, test_file)
    assert proc.returncode == 1 and summary["pytest_exit_status"] == 1
    assert summary["processes"] >= 1  # the pytest process itself


def test_commands_are_named_as_a_user_types_them():
    cli = "/repo/cortex_pipelines/cli.py"
    assert command_of([cli, "--now", "2026-03-28T12:00:00Z", "run"]) == "cortex run"
    assert command_of([cli, "recall", "where do I live"]) == "cortex recall"
    assert command_of(["-c"]) == "pytest worker"
    dagster_server = ["/venv/lib/python3.11/site-packages/dagster/__main__.py", "api", "grpc"]
    assert command_of(dagster_server) == "dagster api grpc"


def test_a_line_cut_short_as_its_process_was_killed_is_left_out(tmp_path):
    log = tmp_path / "cpu.log"
    log.write_text("1.5\ttests/test_a.py\t/repo/cortex_pipelines/cli.py\trun\n0.3\ttests/te\n2.0\t-\t-c\n")
    summary = summarize(log)
    assert summary["processes"] == 2 and summary["cpu_s"] == 3.5
    assert summary["by_test_file"] == {"-": 2.0, "tests/test_a.py": 1.5}
