"""Send → reply latency in a real `cortex dev`, warm and cold, beside the run-per-message baseline.

    python -m bench.live [--warm 12] [--cold 4] [--linger 10] [--json bench/results/live.json]

A temporary CORTEX_HOME with the offline provider; each sample is the time from the moment
`cortex send` returns (or POST /ingest answers) to the moment the reply's file is in the outbox.

warm      messages of a conversation: each sent a second after the previous reply, while the
          processing run lingers (CORTEX_BRAIN_LINGER_SECONDS=--linger)
gateway   the same through the gateway's POST /ingest (CORTEX_INGEST_API_KEY set for the bench)
cold      the first message after idle: sent once no processing run is alive any more; where
          its wait went (cold_phases_p50_s) comes from the run's Dagster events: queued, taken
          off the queue, its process up, the brain's step started, the reply written
baseline  CORTEX_BRAIN_LINGER_SECONDS=0 in a second `cortex dev`: every message waits for a new
          run, as before runs lingered (started as a cold message's is)
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ACTIVE = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
RUNS_QUERY = "{ runsOrError { ... on Runs { results { runId jobName status } } } }"
POLL_S = 0.02
TEXTS = (
    "I prefer window seats on long flights",
    "what did I say about seats?",
    "the Helios review moved to Friday",
    "remind me what moved to Friday",
    "my sister's birthday is in April",
    "I switched to oat milk",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, headers: dict[str, str] | None = None) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _wait(predicate: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(POLL_S)
    raise TimeoutError(f"no {what} within {timeout:.0f} s")


class Instance:
    """A running `cortex dev` in a temporary CORTEX_HOME."""

    def __init__(self, home: Path, env: dict[str, str], ui_port: int, gateway_port: int, key: str):
        self.home, self.env, self.ui_port, self.gateway_port, self.key = home, env, ui_port, gateway_port, key
        self.sent = 0
        self.returned_at = 0.0  # time.time() when the last send returned

    def replies(self) -> int:
        folder = self.home / "outbox" / "webchat"
        return sum(1 for _ in folder.glob("*.json")) if folder.is_dir() else 0

    def run_alive(self) -> bool:
        try:
            found = _post(f"http://127.0.0.1:{self.ui_port}/graphql", {"query": RUNS_QUERY})
        except OSError:
            return True  # the UI is busy: look again
        return any(r["status"] in ACTIVE for r in found["data"]["runsOrError"]["results"])

    def send(self, via: str) -> float:
        """Hand in one message; returns the moment the sender got its answer (time.monotonic)."""
        text = f"{TEXTS[self.sent % len(TEXTS)]} ({self.sent})"
        self.sent += 1
        if via == "gateway":
            envelope = {"channel": "webchat", "text": text, "sender": "user", "external_id": f"b{self.sent}"}
            headers = {"Authorization": f"Bearer {self.key}"}
            _post(f"http://127.0.0.1:{self.gateway_port}/ingest", envelope, headers)
        else:
            cmd = [sys.executable, "-m", "cortex_pipelines.cli", "send", "webchat", text]
            subprocess.run(cmd, env=self.env, check=True, capture_output=True)
        return time.monotonic()

    def latency(self, via: str) -> float:
        """Seconds from the send returning to its reply file in the outbox."""
        before = self.replies()
        returned = self.send(via)
        self.returned_at = time.time()
        _wait(lambda: self.replies() > before, 180, "reply")
        return time.monotonic() - returned

    def phases(self) -> dict[str, float]:
        """Where the last message's wait went, in seconds after its send returned: the processing
        run queued, taken off the queue (its launch begins), its process up (RUN_START), the
        brain's step started, the reply written (the newest outbox file's mtime)."""
        from dagster import DagsterEventType, DagsterInstance, RunsFilter

        wanted = {
            "queued": DagsterEventType.RUN_ENQUEUED,
            "launching": DagsterEventType.RUN_STARTING,
            "process_up": DagsterEventType.RUN_START,
            "step_start": DagsterEventType.STEP_START,
        }
        found: dict[str, float] = {}
        with DagsterInstance.from_config(str(self.home / "dagster_home")) as instance:
            runs = instance.get_runs(filters=RunsFilter(job_name="process_messages"), limit=1)
            for entry in instance.all_logs(runs[0].run_id) if runs else []:
                event = entry.dagster_event
                for name, kind in wanted.items():
                    if event is not None and event.event_type == kind and name not in found:
                        found[name] = entry.timestamp - self.returned_at
        newest = max((self.home / "outbox" / "webchat").glob("*.json"), key=lambda p: p.stat().st_mtime)
        found["reply"] = newest.stat().st_mtime - self.returned_at
        return found


@contextmanager
def cortex_dev(linger_s: float, keep_log: Path | None = None) -> Iterator[Instance]:
    with tempfile.TemporaryDirectory(prefix="cortex-bench-live-") as tmp:
        home, key = Path(tmp) / "home", secrets.token_hex(16)
        ui_port, gateway_port = _free_port(), _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "DAGSTER_"))}
        env.update(
            CORTEX_HOME=str(home),
            CORTEX_LLM_PROVIDER="offline",
            CORTEX_BRAIN_LINGER_SECONDS=str(linger_s),
            CORTEX_INGEST_API_KEY=key,
            CORTEX_GATEWAY_PORT=str(gateway_port),
        )
        log = (Path(tmp) / "dev.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "cortex_pipelines.cli", "dev", "--port", str(ui_port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        instance = Instance(home, env, ui_port, gateway_port, key)
        try:
            _wait(lambda: _up(f"http://127.0.0.1:{ui_port}/server_info"), 120, "Dagster UI")
            _wait(lambda: _up(f"http://127.0.0.1:{gateway_port}/health"), 120, "gateway")
            yield instance
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
            if keep_log is not None:
                shutil.copyfile(Path(tmp) / "dev.log", keep_log)


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except OSError:
        return False


def _idle(instance: Instance) -> None:
    """Until no processing run is alive, so the next message finds the instance cold."""
    _wait(lambda: not instance.run_alive(), 600, "end of the processing run")
    time.sleep(1.0)


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "n": len(samples),
        "p50_s": round(statistics.median(samples), 2),
        "p95_s": round(p95, 2),
        "max_s": round(ordered[-1], 2),
        "samples_s": [round(s, 2) for s in samples],
    }


def lingering(warm: int, cold: int, linger_s: float, say: Callable[[str], None], logs: Path | None) -> dict:
    results: dict[str, list[float]] = {"warm": [], "gateway": [], "cold": []}
    phases: list[dict[str, float]] = []
    with cortex_dev(linger_s, logs and logs / "lingering.log") as instance:
        for n in range(cold):
            _idle(instance)
            results["cold"].append(instance.latency("send"))
            phases.append(instance.phases())
            shown = ", ".join(f"{name} {at:.2f}" for name, at in phases[-1].items())
            say(f"cold {n + 1}/{cold}: {results['cold'][-1]:.2f} s ({shown})")
            for via in ("warm", "gateway"):
                for _ in range(max(1, warm // max(cold, 1))):
                    time.sleep(1.0)  # the user reads the reply and types
                    results[via].append(instance.latency("gateway" if via == "gateway" else "send"))
            say(f"  warm so far p50 {statistics.median(results['warm']):.2f} s")
    figures = {name: summary(samples) for name, samples in results.items() if samples}
    if phases:
        figures["cold_phases_p50_s"] = {
            name: round(statistics.median(p[name] for p in phases if name in p), 2) for name in phases[0]
        }
    return figures


def baseline(count: int, say: Callable[[str], None], logs: Path | None) -> dict:
    samples: list[float] = []
    with cortex_dev(0, logs and logs / "baseline.log") as instance:
        for n in range(count):
            _idle(instance)
            time.sleep(1.0)
            samples.append(instance.latency("send"))
            say(f"baseline {n + 1}/{count}: {samples[-1]:.2f} s")
    return summary(samples)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--warm", type=int, default=12, help="warm messages through `cortex send` (as many via the gateway)"
    )
    parser.add_argument("--cold", type=int, default=4, help="first messages after idle")
    parser.add_argument("--linger", type=float, default=10.0, help="CORTEX_BRAIN_LINGER_SECONDS here")
    parser.add_argument("--baseline", type=int, default=4, help="messages with CORTEX_BRAIN_LINGER_SECONDS=0")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--logs", type=Path, help="keep each `cortex dev` log in this folder")
    args = parser.parse_args()

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    figures = {"lingering": lingering(args.warm, args.cold, args.linger, say, args.logs)}
    if args.baseline:
        figures["baseline_linger_0"] = baseline(args.baseline, say, args.logs)
    figures["machine"] = {"cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
