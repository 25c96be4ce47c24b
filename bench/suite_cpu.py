"""Where the test suite's CPU time goes: pytest runs with every Python process it starts logging its
own CPU time as it exits (a sitecustomize on PYTHONPATH), summed by command and by test file. CI's
30-minute target is a CPU budget on two cores, and most of it is spent in subprocesses.

    python -m bench.suite_cpu [--json bench/results/suite_cpu.json] [-- PYTEST ARGS]

Default pytest arguments are `make test`'s. A process killed by a signal (Dagster's servers as
`cortex dev` stops) logs nothing, nor does one started with -I or its own PYTHONPATH, so the
sums are a floor.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

LOGGER = """
import atexit, os, sys

def _log_cpu():
    times = os.times()
    test = os.environ.get("PYTEST_CURRENT_TEST", "-").split(" ")[0].split("::")[0]
    line = "\\t".join([f"{times.user + times.system:.3f}", test, *sys.argv]).replace("\\n", " ")
    with open(os.environ["SUITE_CPU_LOG"], "a", encoding="utf-8") as log:
        log.write(line + "\\n")

if os.environ.get("SUITE_CPU_LOG"):
    atexit.register(_log_cpu)
"""

MAKE_TEST_ARGS = ["-n", "2", "--dist", "worksteal", "-q"]


def command_of(argv: list[str]) -> str:
    """`cortex <command>` for the CLI (without --now and its value), else the program's name."""
    if argv and argv[0].endswith("cortex_pipelines/cli.py"):
        args = argv[1:]
        if args[:1] == ["--now"]:
            args = args[2:]
        return "cortex " + (args[0] if args else "")
    if not argv:
        return "?"
    if argv[0] == "-c":  # xdist's workers, started through execnet
        return "pytest worker"
    if argv[0].endswith("__main__.py"):  # python -m PACKAGE (pytest, dagster's servers)
        return f"{Path(argv[0]).parent.name} {' '.join(argv[1:3])}".strip()
    return Path(argv[0]).name


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def summarize(log: Path) -> dict:
    """CPU seconds and process counts by command, CPU seconds by the test file that was running."""
    by_command: Counter[str] = Counter()
    processes: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or not _is_number(fields[0]):  # cut short as its process was killed
            continue
        seconds, test, argv = float(fields[0]), fields[1], fields[2:]
        command = command_of(argv)
        by_command[command] += seconds
        processes[command] += 1
        by_file[test] += seconds
    return {
        "cpu_s": round(sum(by_command.values()), 1),
        "processes": sum(processes.values()),
        "by_command": {
            c: {"cpu_s": round(s, 1), "processes": processes[c]} for c, s in by_command.most_common()
        },
        "by_test_file": {f: round(s, 1) for f, s in by_file.most_common()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--top", type=int, default=20, help="rows of each table to print")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(LOGGER, encoding="utf-8")
        log = Path(tmp) / "cpu.log"
        env = {**os.environ, "SUITE_CPU_LOG": str(log)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))
        pytest_args = options.pytest_args or MAKE_TEST_ARGS
        tests = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], env=env)
        summary = summarize(log) if log.exists() else {"cpu_s": 0, "processes": 0}
    summary["pytest_exit_status"] = tests.returncode
    print(f"\n{summary['processes']} processes logged {summary['cpu_s']} CPU-s")
    for table in ("by_command", "by_test_file"):
        print(f"\n{table.replace('_', ' ')}:")
        for name, value in list(summary.get(table, {}).items())[: options.top]:
            if isinstance(value, dict):
                print(f"{value['cpu_s']:9.1f} {value['processes']:6d} {name}")
            else:
                print(f"{value:9.1f} {name}")
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    sys.exit(tests.returncode)  # a failing suite still fails, its figures printed


if __name__ == "__main__":
    main()
