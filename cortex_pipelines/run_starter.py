"""Start a processing run the moment a message arrives, instead of at the inbox sensor's next tick.

The Dagster daemon evaluates sensors every 5 s at most, so the first message after an idle spell
waited up to 5 s before a run was even requested. `cortex dev` runs a RunStarter beside the UI: it
watches what a lingering run watches (brain/linger.py: the bus's doorbell, rung by `cortex send`
and POST /ingest, and the inbox folders) and, when a message arrived while no run in the brain lane
is queued or alive, asks the webserver it started for a process_messages run (GraphQL launchRun).
That run goes through the run queue like any other: the brain lane's limit of one run, its pool and
its lease are unchanged, and the run ingests the inbox itself before it answers. The inbox sensor
stays the fallback (no `cortex dev`, a webserver that does not answer, a dead run still counted as
alive: the sensor reaps it, a message that came as a run was ending). So that the two do not both
start a run for the same message, the starter touches a file as it starts one (starting_file), and
the sensor leaves messages to it for STARTING_GRACE_S after that.

Nothing here opens DuckDB: the watch is a few stat calls every POLL_S, and a question to the
webserver only when something arrived.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from cortex_pipelines.brain.linger import arrival_signature
from cortex_pipelines.files import mtime_ns, touch
from cortex_pipelines.ingest.inbox import unfinished
from cortex_pipelines.lanes import ACTIVE, BRAIN_LANE, PROCESSING_JOB

POLL_S = 0.1
RECHECK_S = 0.5  # how often a file that came while a run was busy is looked at again
STARTING_GRACE_S = 3.0
REQUEST_GRACE_S = 5.0  # by then the requested run is queued, and every sensor sees it as alive
TIMEOUT_S = 10.0
ACTIVE_NAMES = [status.value for status in ACTIVE]
STARTED_BY = {"cortex/started_by": "run_starter"}  # in the UI's run tags: why this run exists

LOCATIONS = """{ repositoriesOrError { ... on RepositoryConnection {
    nodes { name location { name } jobs { name } } } } }"""
LANE_BUSY = """query LaneBusy($filter: RunsFilter) { runsOrError(filter: $filter, limit: 1) {
    ... on Runs { results { runId } } ... on PythonError { message } } }"""
LAUNCH = """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on Error { message } } }"""


def starting_file(db_path: Path) -> Path:
    """Touched by the run starter when it found no live run and starts one."""
    return db_path.with_name(db_path.name + ".starting")


def starting_now(db_path: Path) -> bool:
    """Whether the run starter began starting a run in the last STARTING_GRACE_S: the inbox sensor
    leaves the messages to it (a starter that fails says so, and the sensor's next tick starts one)."""
    touched = mtime_ns(starting_file(db_path))
    return touched is not None and abs(time.time() - touched / 1e9) < STARTING_GRACE_S


def request_claim_file(db_path: Path) -> Path:
    """Which sensor last requested a processing run, for which messages, and when."""
    return db_path.with_name(db_path.name + ".requested")


def claim_run_request(db_path: Path, key: str, sensor: str) -> str | None:
    """Record that `sensor` requests a processing run for the messages `key` names, unless another
    sensor did in the last REQUEST_GRACE_S: that sensor's name then. Dagster skips a repeated run
    key only per sensor: a reminder's firing or a requeued message had the inbox, scheduler and
    supervision sensors each start a run for the same messages in one tick (the extras lingered
    with nothing to do), when the daemon evaluated them in parallel threads; "Test sensor" in the
    UI still runs one beside the daemon."""
    with open(request_claim_file(db_path), "a+", encoding="utf-8") as claim:
        fcntl.flock(claim, fcntl.LOCK_EX)  # released as the file closes
        claim.seek(0)
        try:
            earlier = json.loads(claim.read() or "{}")
        except ValueError:  # torn by a kill mid-write: no claim
            earlier = {}
        fresh = time.time() - float(earlier.get("at", 0)) < REQUEST_GRACE_S
        if earlier.get("key") == key and earlier.get("sensor") != sensor and fresh:
            return str(earlier["sensor"])
        claim.seek(0)
        claim.truncate()
        claim.write(json.dumps({"key": key, "sensor": sensor, "at": time.time()}))
    return None


class StartFailed(Exception):
    """The webserver did not start the run; the inbox sensor will."""


def inbox_files(inbox: Path) -> set[str]:
    """Every file waiting in a channel folder (dot folders such as .rejected, and files still being
    written, dot, .tmp or .part, are not messages yet)."""
    names: set[str] = set()
    with suppress(OSError), os.scandir(inbox) as folders:
        for folder in folders:
            if folder.name.startswith(".") or not folder.is_dir(follow_symlinks=False):
                continue
            with suppress(OSError), os.scandir(folder.path) as entries:
                waiting = (e.name for e in entries if not unfinished(e.name, folder.name))
                names.update(f"{folder.name}/{name}" for name in waiting)
    return names


def local_url(host: str, port: int) -> str:
    """Where this machine reaches a webserver bound to `host`: one bound to every interface
    (0.0.0.0, ::) through the loopback, an IPv6 address in brackets."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Webserver:
    """The GraphQL API of the Dagster webserver that `cortex dev` started."""

    def __init__(self, url: str):
        self.url = url.rstrip("/") + "/graphql"
        self._selector: dict[str, str] | None = None

    def ask(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                answer = json.loads(response.read())
        except (OSError, ValueError) as exc:
            raise StartFailed(f"the Dagster webserver did not answer ({exc})") from None
        if answer.get("errors"):
            raise StartFailed(answer["errors"][0].get("message", "GraphQL error"))
        return answer["data"]

    def selector(self) -> dict[str, str]:
        """Where process_messages lives (the code location that `cortex init`'s workspace loads)."""
        if self._selector is None:
            repositories = self.ask(LOCATIONS)["repositoriesOrError"].get("nodes", [])
            for repo in repositories:
                if any(job["name"] == PROCESSING_JOB for job in repo["jobs"]):
                    self._selector = {
                        "repositoryLocationName": repo["location"]["name"],
                        "repositoryName": repo["name"],
                        "jobName": PROCESSING_JOB,
                    }
                    break
            else:
                raise StartFailed(f"no code location has the {PROCESSING_JOB} job (yet)")
        return self._selector

    def lane_busy(self) -> bool:
        """Whether a run in the brain lane is queued or alive: it answers what arrived."""
        lane = [{"key": key, "value": value} for key, value in BRAIN_LANE.items()]
        found = self.ask(LANE_BUSY, {"filter": {"tags": lane, "statuses": ACTIVE_NAMES}})["runsOrError"]
        if "results" not in found:
            raise StartFailed(found.get("message", "runs could not be listed"))
        return bool(found["results"])

    def start_processing(self) -> None:
        """Queue a process_messages run."""
        tags = [{"key": key, "value": value} for key, value in STARTED_BY.items()]
        params = {"selector": self.selector(), "executionMetadata": {"tags": tags}}
        launched = self.ask(LAUNCH, {"params": params})["launchRun"]
        if launched["__typename"] != "LaunchRunSuccess":
            raise StartFailed(f"{launched['__typename']}: {launched.get('message', '')}".strip(": "))


class RunStarter:
    """Watches for arriving messages and starts a processing run when none is queued or alive."""

    def __init__(self, webserver: Webserver, inbox: Path, db_path: Path, say: Callable[[str], None]):
        self.webserver, self.inbox, self.db_path, self.say = webserver, inbox, db_path, say
        self._told = ""

    def start_if_idle(self) -> bool:
        """Start a processing run unless one is queued or alive; returns whether one was (it may
        end without what just arrived: see watch). A webserver that cannot start one is said
        once per distinct reason, and the inbox sensor starts the run then."""
        try:
            if self.webserver.lane_busy():
                return True
            touch(starting_file(self.db_path))
            self.webserver.start_processing()
        except StartFailed as exc:
            if str(exc) != self._told:
                self.say(f"run starter: {exc}; the inbox sensor starts the processing run")
                self._told = str(exc)
        return False

    def watch(self, stop: threading.Event) -> None:
        """Until `stop` is set: on each new inbox file or ring of the doorbell, start_if_idle.
        Files leaving the inbox (the sensor or a run ingested them) start nothing. A file that
        came while a run was busy is looked after until it leaves the inbox: a run that ended
        without taking it is followed by a new one."""
        signature = arrival_signature(self.inbox, self.db_path)  # the doorbell's time first
        files = inbox_files(self.inbox)
        while not stop.is_set():  # where the job lives, asked once while the webserver starts
            try:
                self.webserver.selector()
                break
            except StartFailed:
                stop.wait(1.0)
        unanswered: set[str] = set()
        look_again = 0.0
        while not stop.wait(POLL_S):
            now = arrival_signature(self.inbox, self.db_path)
            if now != signature:
                rang = now[0] != signature[0]
                signature = now  # taken before looking: a change during the look is seen next poll
                now_files = inbox_files(self.inbox)
                arrived, files = now_files - files, now_files
                if arrived or rang:
                    unanswered = (unanswered | arrived) if self.start_if_idle() else set()
                    look_again = time.monotonic() + RECHECK_S
                    continue
            if unanswered and time.monotonic() >= look_again:
                unanswered &= inbox_files(self.inbox)
                if unanswered and not self.start_if_idle():
                    unanswered = set()
                look_again = time.monotonic() + RECHECK_S
