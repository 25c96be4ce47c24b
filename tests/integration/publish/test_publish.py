"""Published files: budgets, staleness, atomicity, idleness, warmup, the anthropic bulletin."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from dagster import AssetCheckSeverity, DagsterInstance

from cortex_pipelines.config import load_settings
from cortex_pipelines.files import write_atomic
from cortex_pipelines.instance import status
from cortex_pipelines.publish import boot
from cortex_pipelines.publish.outputs import find_secrets, publish, redact
from cortex_pipelines.storage import facts as fact_store
from cortex_pipelines.storage import utcnow
from cortex_pipelines.storage.facts import FactDraft
from tests.support.cli import cortex
from tests.support.messages_server import error, text
from tests.support.published import (
    CONVERSATION,
    ingest_recent_history,
    materialize_all,
    published_bytes,
)


def test_outputs_reflect_the_conversation_and_idle_runs_change_nothing(settings, db, tmp_path):
    ingest_recent_history(settings, db, tmp_path, CONVERSATION)
    with DagsterInstance.ephemeral() as instance:
        first = materialize_all(settings, instance)
        before = published_bytes(settings)
        calls = db.query("SELECT count(*) FROM llm_usage")[0][0]
        second = materialize_all(settings, instance)
    assert published_bytes(settings) == before  # byte-identical, so a prompt cache stays warm
    assert db.query("SELECT count(*) FROM llm_usage")[0][0] == calls
    for name in ("narrative", "memory_bulletin", "boot_context"):
        meta = second.asset_materializations_for_node(name)[0].metadata
        assert meta["written"].value is True and meta["changed"].value is False
        assert first.asset_materializations_for_node(name)[0].metadata["preview"].value.startswith("#")

    assert all(e.passed for e in second.get_asset_check_evaluations())
    bulletin = before["memory_bulletin"].decode()
    assert "## Preferences (1 of 1)" in bulletin and "window seats" in bulletin and "(src " in bulletin
    assert "Figma" in bulletin and "Budget auf 5000 Euro" in bulletin and "Maya Costa" in bulletin
    boot_md = before["boot_context"].decode()
    assert len(boot_md) <= settings.boot_max_chars and "Helios" in boot_md
    assert "Recent decisions" in boot_md and "[high]" in boot_md  # budget → high impact
    assert "Helios" in before["narrative"].decode()
    assert status(settings)["warmup"] == "warm"


def test_bootstrap_stays_within_budget_with_large_state(settings):
    now = utcnow()
    threads = [
        {
            "title": f"Thread {i} " + "x" * 300,
            "status": "open",
            "priority": "high",
            "summary": "s" * 2000,
            "waiting_for": "w" * 200,
            "mood": "tense",
            "last_activity": now,
            "sources": [i],
        }
        for i in range(40)
    ]
    decisions = [{"what": "d" * 900, "impact": "high", "decided_at": now, "source": i} for i in range(30)]
    data = boot.BootInputs(
        now=now,
        timezone="Europe/Lisbon",
        last_activity=now,
        mood="tense",
        warmup="warm",
        snapshot="# Hot\n" + "s" * 5000,
        snapshot_at=now,
        narrative="# N\n" + "n" * 9000,
        narrative_at=now,
        threads=threads,
        decisions=decisions,
        pins=[{"label": "x", "text": "p" * 3000}],
        counts={"facts": 1},
    )
    for budget in (16000, 4000):
        out = boot.render(data, budget, max_threads=7)
        assert len(out) <= budget and "[…truncated]" in out
    out = boot.render(data, 16000, max_threads=7)
    assert out.count("### ") == 7  # top 7 threads only


def test_staleness_rules(settings):
    now = utcnow()
    base = dict(
        now=now,
        timezone="UTC",
        mood="neutral",
        warmup="warm",
        threads=[],
        decisions=[],
        pins=[],
        counts={},
        snapshot="# Hot\nSNAPSHOT BODY",
        narrative="# N\nNARRATIVE BODY",
    )
    fresh = boot.render(
        boot.BootInputs(
            last_activity=now,
            snapshot_at=now - timedelta(minutes=30),
            narrative_at=now - timedelta(hours=30),
            **base,
        ),
        16000,
        7,
    )
    assert "SNAPSHOT BODY" in fresh and "NARRATIVE BODY" in fresh and "Warnings" not in fresh
    stale = boot.render(
        boot.BootInputs(
            last_activity=now - timedelta(days=3),
            snapshot_at=now - timedelta(hours=2),
            narrative_at=now - timedelta(hours=40),
            **{**base, "warmup": "degraded"},
        ),
        16000,
        7,
    )
    assert "SNAPSHOT BODY" not in stale and "NARRATIVE BODY" not in stale
    assert "No activity for 3 days" in stale and "older than 36 h" in stale and "degraded" in stale


def test_a_failed_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "out" / "BOOTSTRAP.md"
    write_atomic(target, "old and complete\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomic(target, "new " * 10000)
    assert target.read_text() == "old and complete\n"
    assert [p.name for p in target.parent.iterdir()] == ["BOOTSTRAP.md"]  # no temp file left behind


def test_a_failed_write_keeps_the_last_good_files(settings, db, tmp_path, monkeypatch):
    import cortex_pipelines.publish.outputs as outputs

    ingest_recent_history(settings, db, tmp_path, CONVERSATION[:2])
    with DagsterInstance.ephemeral() as instance:
        materialize_all(settings, instance)
        before = published_bytes(settings)
        db.run(lambda con: con.execute("UPDATE facts SET text = text || ' Really.'"))

        def read_only(path, content, mode=None):
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(outputs, "write_atomic", read_only)
        result = materialize_all(settings, instance)  # the run goes on; the file's check is red
    assert published_bytes(settings) == before
    meta = result.asset_materializations_for_node("memory_bulletin")[0].metadata
    assert meta["written"].value is False and "Permission denied" in meta["error"].value
    assert status(settings)["warmup"] == "degraded"


def test_unwritable_output_folder_turns_the_written_checks_red(settings, db, tmp_path):
    ingest_recent_history(settings, db, tmp_path, CONVERSATION[:2])
    out = settings.paths.out
    out.chmod(0o500)
    if os.access(out, os.W_OK):  # root writes anyway: a regular file where the folder was cannot hold one
        out.chmod(0o700)
        out.rmdir()
        out.write_text("not a folder\n")
    try:
        with DagsterInstance.ephemeral() as instance:
            result = materialize_all(settings, instance)  # the run goes on
    finally:
        if out.is_dir():
            out.chmod(0o700)
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    for name, path in settings.paths.published.items():
        meta = result.asset_materializations_for_node(name)[0].metadata
        assert meta["written"].value is False and meta["changed"].value is False
        check = checks[f"{name}_written"]
        assert not check.passed and check.severity == AssetCheckSeverity.ERROR
        assert f"could not write {path}" in check.metadata["error"].value
        assert not path.is_file()


def test_publish_skips_a_failed_write_and_retries_next_time(settings, db, monkeypatch):
    import cortex_pipelines.publish.outputs as outputs

    first = publish(db, settings, "narrative", lambda: "# N\nfirst\n")
    assert first.changed

    def no_space(path, content, mode=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs, "write_atomic", no_space)
    failed = publish(db, settings, "narrative", lambda: "# N\nsecond\n")
    assert not failed.written and "kept the last good file" in failed.error
    assert settings.paths.narrative.read_text() == "# N\nfirst\n"
    monkeypatch.undo()
    assert publish(db, settings, "narrative", lambda: "# N\nsecond\n").changed


def test_secrets_never_reach_a_published_file(settings):
    s = load_settings(settings.home, api_key="sk-ant-api03-abcdefghijklmnop")
    leaked = "My key is sk-ant-api03-abcdefghijklmnop and password = hunter2hunter2"
    clean = redact(leaked, s)
    assert "sk-ant" not in clean and "hunter2" not in clean
    assert find_secrets(leaked, s) and not find_secrets(clean, s)


def test_anthropic_bulletin_only_when_memory_changed_and_degraded_on_failure(
    settings, db, tmp_path, messages_server
):
    s_env = {
        "CORTEX_LLM_PROVIDER": "anthropic",
        "CORTEX_BASE_URL": messages_server.url,
        "CORTEX_API_KEY": "test-key",
        "CORTEX_LLM_RETRIES": "0",
    }
    os.environ.update(s_env)
    try:
        ingest_recent_history(settings, db, tmp_path, CONVERSATION[:2])

        def responder(body):
            if "memory bulletin" in body["system"].lower():
                return text("# Memory Bulletin\n\nMaya is a designer who likes window seats.")
            return text("[]")  # extraction: nothing new (patterns are not used with the LLM)

        messages_server.responder = responder
        with DagsterInstance.ephemeral() as instance:
            materialize_all(settings, instance)
            bulletin = settings.paths.memory_bulletin.read_text()
            assert bulletin.startswith("# Memory Bulletin") and "window seats" in bulletin
            purposes = [r[0] for r in db.query("SELECT purpose FROM llm_usage ORDER BY id")]
            assert purposes.count("bulletin") == 1
            materialize_all(settings, instance)  # nothing changed: no bulletin call
            purposes = [r[0] for r in db.query("SELECT purpose FROM llm_usage ORDER BY id")]
            assert purposes.count("bulletin") == 1

            # Memory changes, the model fails: the previous bulletin stays, state is degraded.
            db.run(
                fact_store.insert,
                FactDraft("I prefer aisle seats on trains", "preference", 2, (1,), ("telegram",), utcnow()),
            )
            messages_server.responder = lambda body: error(500)
            failed = materialize_all(settings, instance)
        # The previous bulletin is still true: the written check warns, it does not fail the file.
        (written,) = [
            c for c in failed.get_asset_check_evaluations() if c.check_name == "memory_bulletin_written"
        ]
        assert not written.passed and written.severity == AssetCheckSeverity.WARN
        assert "bulletin generation failed" in written.metadata["error"].value
        assert settings.paths.memory_bulletin.read_text() == bulletin
        assert status(settings)["warmup"] == "degraded"
    finally:
        for key in s_env:
            os.environ.pop(key, None)


def test_bootstrap_keeps_the_narratives_sections_inside_its_own(tmp_path):
    """BOOTSTRAP.md had pasted the narrative's "## Decisions" and "## Timeline" at its own sections'
    level: two "Decisions" sections for an agent reading it section by section (QA, helper-48)."""
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("send", "webchat", "We decided to go with the blue tiles for the bathroom.", home=home)
    cortex("run", home=home)
    text = (home / "out" / "BOOTSTRAP.md").read_text(encoding="utf-8")
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(sections) == len(set(sections)) and "## Narrative" in sections, sections
    narrative = text[text.index("## Narrative") :].split("\n## ")[0]
    assert "\n### Decisions" in narrative and "\n### Timeline" in narrative, narrative
    assert "blue tiles" in narrative


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (text("I'm sorry, but I can't help with rewriting this content."), "names none of the memories"),
        (text("# Memory Bulletin\n\n- Maya is a desig", stop_reason="max_tokens"), "was cut at max_tokens"),
    ],
)
def test_a_bulletin_the_model_refused_emptied_or_cut_is_never_published(
    settings, db, tmp_path, messages_server, answer, why
):
    """Whatever the bulletin model answered was published, and every prompt reads the bulletin: a
    refusal, an empty file, a line cut mid-word (QA, helper-55). The typed render is published
    instead, with a warning in the run."""
    ingest_recent_history(settings, db, tmp_path, CONVERSATION[:2])
    db.run(
        fact_store.insert,
        FactDraft("I prefer window seats on long flights", "preference", 2, (1,), ("telegram",), utcnow()),
    )
    messages_server.responder = lambda body: (
        answer if "memory bulletin" in body["system"].lower() else text("[]")
    )
    env = {
        "CORTEX_LLM_PROVIDER": "anthropic",
        "CORTEX_BASE_URL": messages_server.url,
        "CORTEX_API_KEY": "test-key",
        "CORTEX_LLM_RETRIES": "0",
    }
    run = cortex("run", "-v", home=settings.home, env=env)
    bulletin = settings.paths.memory_bulletin.read_text()
    assert "window seats" in bulletin and "(src " in bulletin, bulletin  # the typed render's lines
    assert "sorry" not in bulletin and "Maya is a desig\n" not in bulletin
    assert f"the model's bulletin is unusable (it {why})" in run.stdout + run.stderr
