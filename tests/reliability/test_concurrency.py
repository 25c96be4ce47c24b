"""Everything at once on one CORTEX_HOME: 4 producer processes write messages (30 each in CI, 500
in the soak) into the inbox while the real inbox sensor ingests them and requests processing runs
(each a separate process, as the daemon launches them), and `cortex status`, `cortex recall` and a
memory materialization run beside them.

The user-visible promise: every message lands in the bus exactly once, is answered exactly once,
in order within its channel, and DuckDB's one-process lock never surfaces as an error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from dagster import DagsterInstance

from cortex_pipelines.config import load_settings
from cortex_pipelines.instance import init_home
from cortex_pipelines.sensors.inbox import inbox_sensor
from cortex_pipelines.storage import Database, bus
from tests.support.sensors import evaluate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
CHANNELS = ("webchat", "telegram", "whatsapp", "signal")
# CI races 4 x 30 messages, written over PRODUCE_S while runs answer; `pytest -m soak` races 4 x 500.
PER_PRODUCER = {"ci": 30, "soak": 500}
DEADLINE_S = {"ci": 480, "soak": 1500}
PRODUCE_S = 30.0  # producers spread their writes, so ingest races processing the whole time
PACE_S = 1.0  # between bystander turns: a user checking, not a load generator
LOCK_ERRORS = ("could not set lock", "conflicting lock", "io error", "transactionexception")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "ANTHROPIC_"))}
    env.update(
        CORTEX_HOME=str(home),
        DAGSTER_HOME=str(home / "dagster_home"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        PYTHONIOENCODING="utf-8",
        # A run lingers for more messages as in `cortex dev`, but ends 5 s after its last answer
        # instead of 120 s: the test waits for it to end.
        CORTEX_BRAIN_LINGER_SECONDS="5",
    )
    return env


def _worker(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.reliability.concurrency_worker", *args]


def _cortex(*args: str) -> list[str]:
    return [sys.executable, "-m", "cortex_pipelines.cli", *args]


def _whereabouts(home: Path, db: Database, tmp_path: Path) -> str:
    """For a failure's message: every inbox file (waiting, archived or rejected) holding a message
    the bus lacks, the rejections' notes, and the end of the last runs' logs."""
    on_bus = {r[0] for r in db.query("SELECT external_id FROM bus")}
    inbox = home / "inbox"
    found = []
    for path in sorted(p for p in inbox.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        ids = [json.loads(line)["external_id"] for line in text.splitlines() if line.strip().startswith("{")]
        if path.suffix == ".error" or any(i not in on_bus for i in ids) or path.name.startswith("."):
            found.append(f"{path.relative_to(inbox)}: {text.strip()[:300]}")
    logs = [f"{log.name}: ...{log.read_text()[-1500:]}" for log in sorted(tmp_path.glob("run-*.log"))]
    return "\n".join(["not on the bus:", *found, *logs[-2:]])


def _inbox_waiting(home: Path) -> int:
    inbox = home / "inbox"
    return sum(
        1 for p in inbox.rglob("*") if p.is_file() and not p.relative_to(inbox).parts[0].startswith(".")
    )


class Bystanders(threading.Thread):
    """`cortex status` and `cortex recall` in a loop, and one materialization of the memory assets, while
    the pipeline works; every call must exit 0 without a lock error."""

    def __init__(self, home: Path):
        super().__init__(daemon=True)
        self.home, self.env = home, _env(home)
        self.stop = threading.Event()
        self.each_kind_called = threading.Event()  # a pipeline done sooner must not stop them before
        self.calls: list[dict] = []

    def _call(self, kind: str, argv: list[str]) -> subprocess.CompletedProcess:
        started = time.monotonic()
        proc = subprocess.run(argv, env=self.env, cwd=REPO, capture_output=True, text=True, timeout=240)
        self.calls.append(
            {
                "kind": kind,
                "rc": proc.returncode,
                "s": time.monotonic() - started,
                "out": proc.stdout,
                "err": proc.stderr,
            }
        )
        return proc

    def run(self) -> None:
        turn = 0
        while not self.stop.wait(PACE_S):
            turn += 1
            self._call("status", _cortex("status", "--json"))
            if turn % 4 == 0:
                self._call("recall", _cortex("recall", "passport renewal form", "--json"))
            if turn == 3:
                self._call("materialize", _worker("materialize", "episodic_memory", "extracted_facts"))
            if turn == 4:
                self.each_kind_called.set()


@pytest.mark.parametrize(
    "size", ["ci", pytest.param("soak", marks=[pytest.mark.soak, pytest.mark.timeout(1800)])]
)
def test_four_producers_race_the_sensor_the_brain_and_the_cli(tmp_path, size):
    per_producer = PER_PRODUCER[size]
    total = len(CHANNELS) * per_producer
    home = tmp_path / "home"
    settings = load_settings(home)
    init_home(settings)
    db = Database(settings.paths.db)
    env = _env(home)

    started = time.monotonic()
    producers = [
        subprocess.Popen(
            _worker("produce", channel, str(per_producer), str(PRODUCE_S)),
            env=env,
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        for channel in CHANNELS
    ]
    bystanders = Bystanders(home)
    bystanders.start()
    runs: list[tuple[subprocess.Popen, Path]] = []
    evaluations = 0
    cursor = None
    marks: dict[str, float] = {}  # when production, ingest and processing finished
    try:
        with DagsterInstance.get() as instance:
            while True:
                result = evaluate(inbox_sensor, instance, str(home), cursor=cursor)
                evaluations += 1
                cursor = result.cursor
                running = runs and runs[-1][0].poll() is None
                if result.run_requests and not running:
                    log = tmp_path / f"run-{len(runs)}.log"
                    with log.open("w") as fh:
                        proc = subprocess.Popen(
                            _worker("run", "process_messages"),
                            env=env,
                            cwd=REPO,
                            stdout=fh,
                            stderr=subprocess.STDOUT,
                        )
                    runs.append((proc, log))
                producing = any(p.poll() is None for p in producers)
                counts = db.run(bus.counts)
                now = time.monotonic() - started
                if not producing:
                    marks.setdefault("produced", now)
                if sum(counts.values()) == total:
                    marks.setdefault("ingested", now)
                if (
                    not producing
                    and not running
                    and not _inbox_waiting(home)
                    and counts["completed"] == total
                ):
                    break
                # The inbox looked at before the bus: an ingester commits a file's rows, then moves it.
                if not producing and not _inbox_waiting(home) and sum(db.run(bus.counts).values()) < total:
                    pytest.fail(f"messages lost: {counts}\n{_whereabouts(home, db, tmp_path)}")
                deadline = DEADLINE_S[size]
                if time.monotonic() - started > deadline:
                    pytest.fail(f"not done in {deadline} s: {counts}\n{_whereabouts(home, db, tmp_path)}")
                time.sleep(0.5)  # the sensor's tick (5 s in the shipped definitions)
        elapsed = time.monotonic() - started
    finally:
        bystanders.each_kind_called.wait(240)
        bystanders.stop.set()
        for proc in [*producers, *(r[0] for r in runs)]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        bystanders.join(timeout=300)

    for proc in producers:
        assert proc.returncode == 0, proc.stderr.read()
    for proc, log in runs:
        text = log.read_text()
        assert proc.returncode == 0, text
        assert not any(e in text.lower() for e in LOCK_ERRORS), text

    # Exactly `total` bus rows, all completed, each answered once.
    assert db.run(bus.counts) == {**dict.fromkeys(bus.BUS_STATES, 0), "completed": total}
    rows = db.query("SELECT id, channel, external_id FROM bus ORDER BY id")
    assert len(rows) == total
    turns = Counter(db.query("SELECT bus_id, role FROM session WHERE bus_id IS NOT NULL"))
    assert all(turns[(r[0], "user")] == 1 and turns[(r[0], "assistant")] == 1 for r in rows)
    replies = Counter(r[0] for r in db.query("SELECT bus_id FROM outbox"))
    assert sorted(replies) == [r[0] for r in rows] and set(replies.values()) == {1}

    # Order within each channel: enqueued, processed and recorded in the producer's order.
    expected = {ch: [f"{ch}-{i:04d}" for i in range(per_producer)] for ch in CHANNELS}
    for channel in CHANNELS:
        assert [r[2] for r in rows if r[1] == channel] == expected[channel]
        processed = db.query(
            "SELECT b.external_id FROM checkpoints c JOIN bus b ON b.id = c.bus_id "
            "WHERE b.channel = ? ORDER BY c.id",
            [channel],
        )
        assert [r[0] for r in processed] == expected[channel]
        recorded = db.query(
            "SELECT b.external_id FROM session s JOIN bus b ON b.id = s.bus_id "
            "WHERE s.role = 'user' AND b.channel = ? ORDER BY s.id",
            [channel],
        )
        assert [r[0] for r in recorded] == expected[channel]

    # The bystanders: every call succeeded, none saw a lock error, progress never went backwards.
    calls = bystanders.calls
    kinds = Counter(c["kind"] for c in calls)
    assert kinds["status"] >= 3 and kinds["recall"] >= 1 and kinds["materialize"] == 1, kinds
    for call in calls:
        assert call["rc"] == 0, call
        assert not any(e in call["err"].lower() for e in LOCK_ERRORS), call["err"]
    completed = [json.loads(c["out"])["bus"]["completed"] for c in calls if c["kind"] == "status"]
    assert completed == sorted(completed), completed
    status_s = sorted(c["s"] for c in calls if c["kind"] == "status")
    print(
        f"\n{total} messages in {elapsed:.1f} s ({elapsed / total * 1000:.0f} ms each; produced at "
        f"{marks['produced']:.1f} s, ingested at {marks['ingested']:.1f} s); "
        f"{evaluations} sensor evaluations, {len(runs)} processing runs; calls {dict(kinds)}; "
        f"status median {status_s[len(status_s) // 2]:.1f} s, max {status_s[-1]:.1f} s"
    )
