"""The first message after idle starts a processing run at once (cortex_pipelines/run_starter.py):
in a real `cortex dev` with the inbox sensor stopped, `cortex send` still gets its reply, from a
run that `cortex dev` started; two messages sent together start one run. Without `cortex dev`,
`cortex send` only drops the file. While the starter starts a run, the inbox sensor does not
request a second one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from dagster import DagsterInstance

from cortex_pipelines.files import touch
from cortex_pipelines.run_starter import STARTING_GRACE_S, RunStarter, Webserver, local_url, starting_file
from cortex_pipelines.sensors.inbox import inbox_sensor
from tests.support.cli import cli_env
from tests.support.dagster_dev import cli, cortex_dev, graphql, wait_for
from tests.support.inbox import drop, msg
from tests.support.sensors import evaluate

SELECTOR = (
    '{repositoryLocationName: "cortex_pipelines.definitions", repositoryName: "__repository__", '
    'sensorName: "inbox_sensor"}'
)
SENSOR_STATE = (
    f"{{ sensorOrError(sensorSelector: {SELECTOR}) {{ "
    "... on Sensor { sensorState { id selectorId status } } } }"
)


def _stop_inbox_sensor(port: int) -> None:
    state = graphql(port, SENSOR_STATE)["data"]["sensorOrError"]["sensorState"]
    stopped = graphql(
        port,
        f'mutation {{ stopSensor(id: "{state["id"]}", jobSelectorId: "{state["selectorId"]}") {{ '
        "... on StopSensorMutationResult { instigationState { status } } ... on PythonError { message } } }",
    )
    assert stopped["data"]["stopSensor"]["instigationState"]["status"] == "STOPPED", stopped


def _replies(home) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((home / "outbox" / "webchat").glob("*.json"))]


def _processing_runs(home) -> list:
    with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        return [r for r in instance.get_runs() if r.job_name == "process_messages"]


@pytest.mark.soak
@pytest.mark.slow
def test_a_message_after_idle_starts_its_run_without_the_inbox_sensor(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_BRAIN_LINGER_SECONDS", "2")  # each run ends soon after its answers
    home = tmp_path / "home"
    with cortex_dev(home, tmp_path / "dev.log") as (port, env, _proc):
        _stop_inbox_sensor(port)

        cli("send", "webchat", "I prefer window seats on long flights", env=env)
        wait_for(lambda: len(_replies(home)) == 1, 180, "the first reply")
        wait_for(lambda: all(r.is_finished for r in _processing_runs(home)), 120, "the run to end")

        # Handed in together, as a connector passes on two messages at once: two `cortex send`s
        # take seconds each, and the run the first started could end its 2 s linger between them.
        together = [
            msg("webchat", "what did I say about seats?", "t-1", sender="user"),
            msg("webchat", "the Helios review moved to Friday", "t-2", sender="user"),
        ]
        folder = home / "inbox" / "webchat"
        (folder / ".together.jsonl.tmp").write_text("".join(json.dumps(m) + "\n" for m in together))
        (folder / ".together.jsonl.tmp").rename(folder / "together.jsonl")
        wait_for(lambda: len(_replies(home)) == 3, 180, "both replies")

        runs = _processing_runs(home)
        assert len(runs) == 2, [r.tags for r in runs]  # the second message found a run queued or alive
        assert all(r.tags.get("cortex/started_by") == "run_starter" for r in runs)
        assert not any("dagster/sensor_name" in r.tags for r in runs)
        status = json.loads(cli("status", "--json", env=env).stdout)
        assert status["bus"]["completed"] == 3


def test_send_without_cortex_dev_only_drops_the_file(tmp_path):
    home = tmp_path / "home"
    sent = subprocess.run(
        [sys.executable, "-m", "cortex_pipelines.cli", "send", "webchat", "hello, anyone there?"],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sent.returncode == 0 and sent.stderr == "", sent.stderr
    (dropped,) = (home / "inbox" / "webchat").glob("*.json")
    assert json.loads(dropped.read_text())["text"] == "hello, anyone there?"
    # No Dagster instance was opened: its home holds only what `cortex init` writes.
    assert sorted(os.listdir(home / "dagster_home")) == ["dagster.yaml", "workspace.yaml"]


def test_the_inbox_sensor_leaves_a_message_to_a_starting_run_then_falls_back(settings, db):
    drop(settings, "webchat", "a.json", msg("webchat", "hello", "1"))
    marker = starting_file(settings.paths.db)
    touch(marker)  # `cortex dev` found no live run and is starting one
    with DagsterInstance.ephemeral() as instance:
        waiting = evaluate(inbox_sensor, instance, str(settings.home))
        assert not waiting.run_requests
        assert "`cortex dev` is starting a run" in waiting.skip_reason.skip_message

        long_ago = marker.stat().st_mtime - STARTING_GRACE_S - 1  # and no run came of it
        os.utime(marker, (long_ago, long_ago))
        fallback = evaluate(inbox_sensor, instance, str(settings.home), cursor=waiting.cursor)
        assert len(fallback.run_requests) == 1


def test_a_file_still_being_written_is_no_arrival(tmp_path):
    """A connector writes, then renames (README): its .tmp, .part or dot file is not a message yet,
    and starting a run for it would find nothing to answer."""
    from cortex_pipelines.run_starter import inbox_files

    (tmp_path / "webchat").mkdir()
    (tmp_path / ".rejected").mkdir()
    for name in ("a.json.tmp", "b.jsonl.part", ".c.json"):
        (tmp_path / "webchat" / name).write_text("{}")
    (tmp_path / ".rejected" / "old.json").write_text("{}")
    assert inbox_files(tmp_path) == set()
    (tmp_path / "webchat" / "a.json.tmp").rename(tmp_path / "webchat" / "a.json")
    assert inbox_files(tmp_path) == {"webchat/a.json"}


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:3000"),
        ("0.0.0.0", "http://127.0.0.1:3000"),  # every interface: reached through the loopback
        ("::", "http://127.0.0.1:3000"),
        ("::1", "http://[::1]:3000"),
        ("localhost", "http://localhost:3000"),
    ],
)
def test_cortex_dev_reaches_its_webserver_whatever_it_binds(host, url):
    assert local_url(host, 3000) == url


def test_a_webserver_that_does_not_answer_is_said_once_and_left_to_the_inbox_sensor(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    said: list[str] = []
    db_path = tmp_path / "cortex.duckdb"
    starter = RunStarter(Webserver(local_url("127.0.0.1", port)), tmp_path / "inbox", db_path, said.append)
    assert starter.start_if_idle() is False
    assert starter.start_if_idle() is False
    assert len(said) == 1, said  # once per reason, not once per message
    assert "did not answer" in said[0] and "the inbox sensor starts the processing run" in said[0]
    assert not starting_file(db_path).exists()  # the sensor does not wait for a run that never comes


class ScriptedWebserver(Webserver):
    """The Dagster webserver's GraphQL answers, as it gives them, for a brain lane that is busy
    until told otherwise; counts the runs it was asked to launch."""

    def __init__(self):
        super().__init__("http://127.0.0.1:9")
        self.busy, self.launched = True, 0
        self.asked_where = threading.Event()  # the starter asks once it has looked at the inbox

    def ask(self, query: str, variables: dict | None = None) -> dict:
        if "repositoriesOrError" in query:
            self.asked_where.set()
            repository = {
                "name": "__repository__",
                "location": {"name": "cortex_pipelines.definitions"},
                "jobs": [{"name": "process_messages"}],
            }
            return {"repositoriesOrError": {"nodes": [repository]}}
        if "runsOrError" in query:
            return {"runsOrError": {"results": [{"runId": "r1"}] if self.busy else []}}
        self.launched += 1
        return {"launchRun": {"__typename": "LaunchRunSuccess", "run": {"runId": f"new{self.launched}"}}}


def test_a_message_that_came_as_a_run_was_ending_gets_a_run_of_its_own(tmp_path):
    """A file that arrives while a run is alive is left to that run; if the run ends without
    taking it, the starter starts another within RECHECK_S, and none once the file is taken."""

    inbox, db_path = tmp_path / "inbox", tmp_path / "cortex.duckdb"
    (inbox / "webchat").mkdir(parents=True)
    webserver = ScriptedWebserver()
    starter = RunStarter(webserver, inbox, db_path, lambda line: None)
    stop = threading.Event()
    watching = threading.Thread(target=starter.watch, args=(stop,), daemon=True)
    watching.start()
    try:
        assert webserver.asked_where.wait(30)
        (inbox / "webchat" / "late.json").write_text(json.dumps(msg("webchat", "still there?", "1")))
        time.sleep(0.5)
        assert webserver.launched == 0  # the live run answers it
        webserver.busy = False  # ... but it ended without ingesting the file
        deadline = time.monotonic() + 5
        while webserver.launched == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert webserver.launched == 1
        (inbox / "webchat" / "late.json").unlink()  # the new run ingested it
        time.sleep(1.5)
        assert webserver.launched == 1
    finally:
        stop.set()
        watching.join(5)
