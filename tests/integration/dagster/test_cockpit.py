"""What the Dagster UI shows: definitions metadata, the failed-messages check, rebuild and retry."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from dagster import (
    AssetCheckKey,
    AssetKey,
    AssetSelection,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    materialize,
)
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG
from dagster_graphql.test.utils import define_out_of_process_context, materialize_assets

from cortex_pipelines.assets import ALL_ASSETS, ALL_CHECKS
from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import load_settings
from cortex_pipelines.definitions import defs
from cortex_pipelines.ingest.inbox import ingest_inbox, ingest_path
from cortex_pipelines.instance import init_home
from cortex_pipelines.lanes import BRAIN_LANE, BrainLaneRunCoordinator
from cortex_pipelines.llm.base import LLMError, ToolCall
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, vector_store
from cortex_pipelines.resources import cortex_resources
from cortex_pipelines.sensors.inbox import inbox_sensor
from cortex_pipelines.sensors.scheduler import scheduler
from cortex_pipelines.storage import Database, bus
from cortex_pipelines.storage.bus import requeue_failed
from cortex_pipelines.storage.lease import lane_wanted
from tests.support.inbox import drop, msg
from tests.support.scripted_llm import ScriptedClient, scripted_resources
from tests.support.sensors import evaluate


def test_every_asset_has_group_description_kind_owner_code_version_and_automation():
    graph = defs.resolve_asset_graph()
    groups = set()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        groups.add(node.group_name)
        assert node.description and "\n" not in node.description.strip()
        assert node.owners == ["team:cortex"]
        assert node.kinds
        if key.to_user_string() != "bus_messages":
            assert node.code_version
        # sensors answer messages; everything after them runs on its automation condition
        assert (node.automation_condition is None) == (node.group_name in ("ingest", "brain"))
    assert groups == {"ingest", "brain", "memory", "publish"}
    for name in ("rebuild_memory_job", "process_messages", "cortex_main"):
        assert defs.resolve_job_def(name) is not None
    assert not defs.schedules


def test_failed_messages_turn_the_check_red_until_retried(settings, db):
    s = load_settings(settings.home, max_attempts=1)
    drop(s, "webchat", "a.json", msg("webchat", "hello", "1"))
    ingest_inbox(s, db)
    Brain(db, s, ScriptedClient(LLMError("HTTP 500"))).drain()
    assert db.run(bus.counts)["failed"] == 1
    resources = cortex_resources(str(settings.home))
    session = [a for a in ALL_ASSETS if a.key.path[0] == "session_messages"]
    checks = [c for c in ALL_CHECKS if "no_failed_messages" in str(c.check_keys)]

    def evaluation(result):
        return {e.check_name: e for e in result.get_asset_check_evaluations()}["no_failed_messages"]

    with DagsterInstance.ephemeral() as instance:
        # the brain lease in this process is free again, so the run drains (nothing to do)
        red = materialize([*session, *checks], instance=instance, resources=resources, raise_on_error=False)
        assert not evaluation(red).passed and "HTTP 500" in evaluation(red).metadata["latest"].value
        assert db.run(requeue_failed, None) == [1]
        Brain(db, s, ScriptedClient("hi")).drain()
        green = materialize([*session, *checks], instance=instance, resources=resources)
        assert evaluation(green).passed


def test_one_check_runs_alone_as_from_the_ui_and_one_asset_runs_only_its_own_checks(settings, db):
    """A group's checks share one step, yet the UI still executes a single check, and a run of one
    asset evaluates that asset's checks and no others."""
    resources = cortex_resources(str(settings.home))
    one = AssetCheckKey(AssetKey("extracted_facts"), "hot_memory_within_cap")
    everything = [*ALL_ASSETS, *ALL_CHECKS]
    with DagsterInstance.ephemeral() as instance:
        alone = materialize(
            everything, selection=AssetSelection.checks(one), instance=instance, resources=resources
        )
        narrative = materialize(
            everything, selection=AssetSelection.assets("narrative"), instance=instance, resources=resources
        )
    assert [e.asset_check_key for e in alone.get_asset_check_evaluations()] == [one]
    assert not alone.get_asset_materialization_events()
    assert {e.asset_check_key for e in narrative.get_asset_check_evaluations()} == {
        AssetCheckKey(AssetKey("narrative"), "narrative_written"),
        AssetCheckKey(AssetKey("narrative"), "narrative_has_no_secrets"),
    }


def test_rebuild_memory_job_re_embeds_everything(settings, db, tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(
        "".join(
            json.dumps({"channel": "telegram", "text": t, "sender": "maya", "external_id": f"h{n}"}) + "\n"
            for n, t in enumerate(["I prefer green tea.", "My name is Maya.", "ok"])
        )
    )
    ingest_path(path, settings, db, history=True)
    resources = cortex_resources(str(settings.home))
    with DagsterInstance.ephemeral() as instance:
        assert materialize(
            [a for a in ALL_ASSETS if a.key.path[0] in ("episodic_memory", "extracted_facts")],
            instance=instance,
            resources=resources,
        ).success
        vectors = vector_store(settings.paths.lance)
        before = (vectors.count(EPISODIC), vectors.count(SEMANTIC))
        result = defs.resolve_job_def("rebuild_memory_job").execute_in_process(
            instance=instance, resources=resources
        )
        assert result.success
        logs = [entry.user_message for entry in instance.all_logs(result.run_id)]
        assert any("indexed 3 session message(s)" in m for m in logs)  # progress in the run log
    assert (vectors.count(EPISODIC), vectors.count(SEMANTIC)) == before == (3, 2)


def test_the_run_log_has_a_line_per_message_and_every_tool_call_in_full(settings, db):
    drop(settings, "webchat", "a.json", msg("webchat", "Remember: my sister <b>Ana</b> lives in Porto.", "1"))
    drop(settings, "telegram", "b.json", msg("telegram", "ok", "2"))
    ingest_inbox(settings, db)
    saved = {"text": "Maya's sister Ana lives in Porto.", "category": "identity"}
    llm = ScriptedClient(ToolCall("t1", "memory_save", saved), "Noted: Ana lives in Porto.", "x" * 500)
    session = [a for a in ALL_ASSETS if a.key.path[0] == "session_messages"]
    resources = scripted_resources(str(settings.home), llm)
    with DagsterInstance.ephemeral() as instance:
        result = materialize(session, instance=instance, resources=resources)
        assert result.success
        logs = [entry.user_message for entry in instance.all_logs(result.run_id)]
    (tool_result,) = [b for b in llm.requests[1].messages[-1]["content"] if b.get("type") == "tool_result"]
    assert f"bus #1 tool memory_save {json.dumps(saved)} → {tool_result['content']}" in logs
    first = [m for m in logs if m.startswith("bus #1 (msg 1) webchat maya: ")]
    assert first == [
        "bus #1 (msg 1) webchat maya: Remember: my sister &lt;b&gt;Ana&lt;/b&gt; lives in Porto. "
        "→ webchat: Noted: Ana lives in Porto."
    ]
    (second,) = [m for m in logs if m.startswith("bus #2 (msg 3) telegram maya: ok → telegram: ")]
    assert second.endswith("x…") and len(second) < 200  # the reply shortened


def test_the_daemon_looks_at_the_run_queue_twice_a_second(settings):
    """The first message after idle waits for the daemon's look at the run queue. The shipped
    0.5 s reaches the daemon through a private field of Dagster's coordinator (its own option
    takes whole seconds), which a Dagster upgrade may rename."""
    with DagsterInstance.get() as instance:
        assert instance.run_coordinator.dequeue_interval_seconds == 0.5


def test_materialize_all_in_the_ui_puts_the_run_in_the_brain_lane(settings):
    """Launched as the asset graph's "Materialize all" launches it: the implicit asset job with an
    asset selection, through GraphQL, on an instance configured by the shipped dagster.yaml."""
    wanted = lane_wanted(settings.paths.db)
    with DagsterInstance.get() as instance:
        assert isinstance(instance.run_coordinator, BrainLaneRunCoordinator)
        # a processing run lingering for messages, as `cortex dev` keeps one
        instance.add_run(
            DagsterRun(job_name="process_messages", status=DagsterRunStatus.STARTED, tags=BRAIN_LANE)
        )
        workspace = str(settings.paths.dagster_home / "workspace.yaml")
        runs, lingering_asked_to_end = {}, {}
        with define_out_of_process_context(workspace, None, instance) as context:
            for name, keys in {
                "memory": ["episodic_memory"],
                "all": ["session_messages", "episodic_memory", "threads"],
            }.items():
                launched = materialize_assets(context, [AssetKey(k) for k in keys])
                runs[name] = launched.data["launchPipelineExecution"]
                lingering_asked_to_end[name] = wanted.exists()
        tags = {name: instance.get_run_by_id(r["run"]["runId"]).tags for name, r in runs.items()}
    assert tags["all"]["cortex/lane"] == "brain" and tags["all"]["dagster/max_runtime"] == "3600"
    assert "cortex/lane" not in tags["memory"] and "dagster/max_runtime" not in tags["memory"]
    # it would hold the lane for its idle window (120 s) while "Materialize all" waits in the queue
    assert lingering_asked_to_end == {"memory": False, "all": True}


def test_sensors_evaluated_in_one_tick_request_one_run_for_the_same_messages(settings):
    """Two sensors evaluated at the same moment (the daemon's sensor threads, as dagster.yaml had
    them, or "Test sensor" in the UI beside the daemon): a message waiting as the scheduler sensor
    fired had it and the inbox sensor each start a run."""
    drop(settings, "webchat", "a.json", msg("webchat", "hello", "1"))
    ingest_inbox(settings, Database(settings.paths.db))
    with DagsterInstance.ephemeral() as instance, ThreadPoolExecutor(2) as pool:
        ticks = list(
            pool.map(
                lambda sensor: evaluate(sensor, instance, str(settings.home), sensor_name=sensor.name),
                [inbox_sensor, scheduler],
            )
        )
    requested = [tick for tick in ticks if tick.run_requests]
    assert len(requested) == 1 and len(requested[0].run_requests) == 1
    (skipped,) = [tick for tick in ticks if not tick.run_requests]
    other = "inbox_sensor" if requested[0] is ticks[0] else "scheduler"
    assert (
        skipped.skip_reason.skip_message
        == f"1 waiting; {other} has just requested a run for the same messages"
    )


def _ended_run(instance: DagsterInstance, run_key: str, status: DagsterRunStatus) -> DagsterRun:
    """A processing run the inbox sensor requested under `run_key`, ended with `status`."""
    return instance.add_run(
        DagsterRun(
            job_name="process_messages",
            status=status,
            tags={RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: "inbox_sensor", "cortex/lane": "brain"},
        )
    )


def test_a_run_key_dagster_would_skip_is_a_skip_reason_in_the_tick_list(settings):
    drop(settings, "webchat", "a.json", msg("webchat", "hello", "1"))
    with DagsterInstance.ephemeral() as instance:
        first = evaluate(inbox_sensor, instance, str(settings.home), sensor_name="inbox_sensor")
        (request,) = first.run_requests
        # the run Dagster made of that request, ended with the message still waiting
        run = _ended_run(instance, request.run_key, DagsterRunStatus.CANCELED)
        again = evaluate(
            inbox_sensor, instance, str(settings.home), sensor_name="inbox_sensor", cursor=first.cursor
        )
    assert not again.run_requests
    assert again.skip_reason.skip_message == (
        f"1 waiting; run {run.run_id[:8]} was already requested for the same messages (canceled); "
        "a new message, attempt or API key requests the next"
    )


def test_messages_a_refused_key_left_waiting_get_a_run_once_the_key_is_changed(tmp_path, monkeypatch):
    """A 401 puts the message back uncounted, so what waits is unchanged and its run key with it:
    after the owner fixed the key and restarted `cortex dev`, the sensor skipped the messages as
    "already requested" until a new one arrived. A changed key asks again; the same key does not."""
    monkeypatch.setenv("CORTEX_LLM_PROVIDER", "anthropic")
    monkeypatch.setenv("CORTEX_API_KEY", "sk-wrong")
    settings = load_settings(tmp_path / "home")
    init_home(settings)
    drop(settings, "webchat", "a.json", msg("webchat", "hello", "1"))
    with DagsterInstance.ephemeral() as instance:
        first = evaluate(inbox_sensor, instance, str(settings.home), sensor_name="inbox_sensor")
        (request,) = first.run_requests
        # the run the refused key failed, its message put back as it was
        _ended_run(instance, request.run_key, DagsterRunStatus.FAILURE)
        unchanged = evaluate(
            inbox_sensor, instance, str(settings.home), sensor_name="inbox_sensor", cursor=first.cursor
        )
        monkeypatch.setenv("CORTEX_API_KEY", "sk-right")
        fixed = evaluate(
            inbox_sensor, instance, str(settings.home), sensor_name="inbox_sensor", cursor=first.cursor
        )
    assert not unchanged.run_requests and "already requested" in unchanged.skip_reason.skip_message
    (again,) = fixed.run_requests
    assert again.run_key != request.run_key
    assert "sk-right" not in again.run_key and "sk-wrong" not in request.run_key
