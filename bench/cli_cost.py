"""CPU seconds of one `cortex` process, per command, against the same commands of a baseline commit,
turn about on the same machine: what every user's command and every test's subprocess pays.

    python -m bench.cli_cost --baseline 62db0d1 [--reps 5] [--json bench/results/cli_cost.json]

Each arm has its own home; each rep sends one message and answers it (`cortex run`), then asks the
light commands. The baseline is a git worktree of that commit run with this checkout's virtualenv
(`python -m` imports the package from the working directory). CPU is the child's user + system
time (resource.getrusage), which a busy machine inflates far less than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

COMMANDS = (
    ("send", ["send", "webchat", "My sister Ana lives in Lisbon and likes chess."]),
    ("run", ["run"]),
    ("status", ["status"]),
    ("outbox", ["outbox"]),
    ("schedules", ["schedules"]),
    ("recall", ["recall", "where does my sister live"]),
)


def _cpu_of(argv: list[str], env: dict, cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(trees: dict[str, Path], reps: int, tmp: Path, console: Console) -> dict:
    cpu: dict[str, dict[str, list[float]]] = {arm: {name: [] for name, _ in COMMANDS} for arm in trees}
    envs = {}
    for arm, tree in trees.items():
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "ANTHROPIC_"))}
        envs[arm] = {**env, "CORTEX_HOME": str(tmp / arm), "CORTEX_LLM_PROVIDER": "offline"}
        subprocess.run(
            [sys.executable, "-m", "cortex_pipelines.cli", "init"], env=envs[arm], cwd=tree, check=True
        )
    for rep in range(reps):
        for arm, tree in trees.items():
            for name, args in COMMANDS:
                argv = [sys.executable, "-m", "cortex_pipelines.cli", *args]
                cpu[arm][name].append(_cpu_of(argv, envs[arm], tree))
        console.print(f"rep {rep + 1}/{reps} done")
    medians = {
        arm: {name: round(statistics.median(v), 2) for name, v in runs.items()} for arm, runs in cpu.items()
    }
    return {
        "reps": reps,
        "cpu_s_median": medians,
        "ratio": {
            name: round(medians["current"][name] / medians["baseline"][name], 2) for name, _ in COMMANDS
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the commit to compare with")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        worktree = tmp / "baseline-tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(worktree), args.baseline], cwd=repo, check=True
        )
        try:
            found = measure({"baseline": worktree, "current": repo}, args.reps, tmp, console)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=repo, check=True)
    found["baseline"] = args.baseline
    console.print_json(data=found)
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
