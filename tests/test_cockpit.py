"""What the Dagster UI shows: definitions metadata, the failed-messages check, rebuild and retry."""

from __future__ import annotations

import json

from dagster import DagsterInstance, materialize

from cortex_pipelines.assets import ALL_ASSETS, ALL_CHECKS
from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import load_settings
from cortex_pipelines.definitions import defs
from cortex_pipelines.ingest.inbox import ingest_inbox, ingest_path
from cortex_pipelines.llm.base import LLMError
from cortex_pipelines.llm.scripted import ScriptedClient
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, vector_store
from cortex_pipelines.resources import CortexResource
from cortex_pipelines.storage import bus
from cortex_pipelines.storage.bus import requeue_failed
from tests.conftest import drop, msg


def test_every_asset_has_group_description_kind_owner_and_code_version():
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
    assert groups == {"ingest", "brain", "memory", "publish"}
    for name in ("maintenance_job", "rebuild_memory_job", "publish_job", "process_messages"):
        assert defs.resolve_job_def(name) is not None
    assert {s.name for s in defs.schedules} >= {"publish_job_schedule", "maintenance_job_schedule"}


def test_failed_messages_turn_the_check_red_until_retried(settings, db):
    s = load_settings(settings.home, max_attempts=1)
    drop(s, "webchat", "a.json", msg("webchat", "hello", "1"))
    ingest_inbox(s, db)
    Brain(db, s, ScriptedClient(LLMError("HTTP 500"))).drain()
    assert bus.counts(db)["failed"] == 1
    resources = {"cortex": CortexResource(home=str(settings.home))}
    session = [a for a in ALL_ASSETS if a.key.path[0] == "session_messages"]
    check = [c for c in ALL_CHECKS if "no_failed_messages" in str(c.check_keys)]
    with DagsterInstance.ephemeral() as instance:
        # the brain lease in this process is free again, so the run drains (nothing to do)
        red = materialize([*session, *check], instance=instance, resources=resources, raise_on_error=False)
        evaluation = red.get_asset_check_evaluations()[0]
        assert not evaluation.passed and "HTTP 500" in evaluation.metadata["latest"].value
        assert db.run(requeue_failed, None) == [1]
        Brain(db, s, ScriptedClient("hi")).drain()
        green = materialize([*session, *check], instance=instance, resources=resources)
        assert green.get_asset_check_evaluations()[0].passed


def test_rebuild_memory_job_re_embeds_everything(settings, db, tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(
        "".join(
            json.dumps({"channel": "telegram", "text": t, "sender": "maya", "external_id": f"h{n}"}) + "\n"
            for n, t in enumerate(["I prefer green tea.", "My name is Maya.", "ok"])
        )
    )
    ingest_path(path, settings, db, history=True)
    resources = {"cortex": CortexResource(home=str(settings.home))}
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
