"""The Dagster layer with the real machinery: sensor evaluation, job execution, definitions."""

from __future__ import annotations

import json

from dagster import DagsterInstance, RunRequest, materialize

from cortex_pipelines.assets import bus_messages, session_messages
from cortex_pipelines.definitions import defs
from cortex_pipelines.resources import cortex_resources
from cortex_pipelines.sensors.inbox import inbox_sensor
from cortex_pipelines.storage import bus, outbox
from tests.support.inbox import drop, msg
from tests.support.sensors import evaluate


def _evaluate(instance, settings, cursor=None):
    return evaluate(inbox_sensor, instance, str(settings.home), cursor=cursor)


def test_sensor_ingests_requests_one_run_and_keeps_a_cursor(settings, db):
    drop(settings, "webchat", "a.json", msg("webchat", "hello", "1"))
    drop(settings, "webchat", "b.json", msg("webchat", "again", "2", priority="urgent"))
    with DagsterInstance.ephemeral() as instance:
        result = _evaluate(instance, settings)
        assert len(result.run_requests) == 1
        request: RunRequest = result.run_requests[0]
        assert request.tags["cortex/lane"] == "brain"
        cursor = json.loads(result.cursor)
        assert cursor["ingested"] == 2 and cursor["last_run_key"] == request.run_key
        assert [e.asset_key.path for e in result.asset_events] == [["bus_messages"]]
        assert db.run(bus.counts)["pending"] == 2

        # Nothing new: the same pending messages give the same run key (Dagster dedupes it).
        again = _evaluate(instance, settings, cursor=result.cursor)
        assert again.run_requests[0].run_key == request.run_key
        assert json.loads(again.cursor)["ingested"] == 2
        assert again.asset_events == []


def test_sensor_skips_when_nothing_waits(settings):
    with DagsterInstance.ephemeral() as instance:
        result = _evaluate(instance, settings)
    assert result.run_requests == [] or result.run_requests is None
    assert "no messages waiting" in result.skip_reason.skip_message


def test_process_messages_job_executes_in_process(settings, db):
    drop(settings, "webchat", "a.json", msg("webchat", "I'm vegetarian, by the way.", "1"))
    drop(settings, "telegram", "b.json", msg("telegram", "Urgent: call me", "2", priority="urgent"))
    with DagsterInstance.ephemeral() as instance:
        _evaluate(instance, settings)  # ingest
        job = defs.resolve_job_def("process_messages")
        result = job.execute_in_process(instance=instance, resources=cortex_resources(str(settings.home)))
        assert result.success
        mat = result.asset_materializations_for_node("session_messages")[0]
        assert mat.metadata["completed"].value == 2
        assert mat.metadata["bus_pending"].value == 0
    waiting = db.run(outbox.waiting)
    assert [w["channel"] for w in waiting] == ["telegram", "webchat"]  # urgent first
    files = sorted(p.name for p in settings.paths.outbox.rglob("*.json"))
    assert len(files) == 2


def test_materialize_session_messages_with_the_external_bus(settings, db):
    drop(settings, "webchat", "a.json", msg("webchat", "hi", "1"))
    with DagsterInstance.ephemeral() as instance:
        _evaluate(instance, settings)
        result = materialize(
            [bus_messages, session_messages],
            instance=instance,
            resources=cortex_resources(str(settings.home)),
            selection=[session_messages],
        )
    assert result.success
    assert db.run(bus.counts)["completed"] == 1


def test_definitions_load_and_the_sensors_run_by_default():
    from dagster import DefaultSensorStatus

    assert {s.name: s.default_status for s in defs.sensors} == dict.fromkeys(
        [
            "inbox_sensor",
            "scheduler",
            "supervision",
            "memory_sensor",
            "turn_retention",
            "run_history_retention",
            "automation_sensor",
        ],
        DefaultSensorStatus.RUNNING,
    )
    assert defs.resolve_job_def("cortex_main") is not None
    graph = defs.resolve_asset_graph()
    parents = graph.get(session_messages.key).parent_keys
    assert bus_messages.key in parents
