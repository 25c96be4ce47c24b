"""The `cortex` command line as a user runs it: a subprocess with its own CORTEX_HOME and no
CORTEX_* or Anthropic variables leaking in from the test runner."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

CALL_TIMEOUT_S = 180


def cli_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORTEX_")}
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "DAGSTER_HOME", "COLUMNS", "LINES"):
        env.pop(key, None)
    env["CORTEX_HOME"] = str(home)
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra or {})
    return env


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cortex_pipelines.cli", *args]


def cortex(
    *args: str,
    home: Path,
    check: bool = True,
    env: dict[str, str] | None = None,
    wrap: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run `cortex ARGS` with CORTEX_HOME=home; with check, a non-zero exit fails the test. `wrap`
    is a command line it runs under (tests.support.stores.read_only_mount's)."""
    proc = subprocess.run(
        [*wrap, *cli_argv(*args)],
        env=cli_env(home, env),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=CALL_TIMEOUT_S,
        cwd=home.parent,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"`cortex {' '.join(args)}` exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


def together(*args: str, home: Path, count: int = 2) -> list[subprocess.CompletedProcess[str]]:
    """`count` `cortex ARGS` processes on one home, started at the same moment (none checked)."""
    runs = [
        subprocess.Popen(
            cli_argv(*args),
            env=cli_env(home),
            cwd=home.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        for _ in range(count)
    ]
    outputs = [run.communicate(timeout=CALL_TIMEOUT_S) for run in runs]
    return [
        subprocess.CompletedProcess(run.args, run.returncode, out, err)
        for run, (out, err) in zip(runs, outputs, strict=True)
    ]
