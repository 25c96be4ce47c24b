"""Run-history retention (`CORTEX_RUN_HISTORY_DAYS`, 30 by default): Dagster's finished runs older
than that go, with their event logs (history/runs/<run_id>.db, the index's copies, the asset-check
executions) and compute logs (storage/<run_id>/), after each `cortex run` and by the hourly
`run_history_retention` sensor. Never deleted: a run not finished, the newest run of each job, and
a run that holds an asset's latest materialization or a check's latest evaluation. Dagster's clock
is the real one, so moving Cortex's clock (`--now`, CORTEX_NOW) ages every run at once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dagster import (
    AssetCheckKey,
    AssetCheckResult,
    AssetKey,
    AssetSelection,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    asset,
    asset_check,
    evaluate_automation_conditions,
    materialize,
)
from dagster._core.utils import make_new_run_id

from cortex_pipelines.assets import ALL_ASSETS, ALL_CHECKS
from cortex_pipelines.definitions import defs
from cortex_pipelines.resources import cortex_resources
from cortex_pipelines.sensors.retention import run_history_retention
from cortex_pipelines.storage.run_history import holders_of_latest
from tests.support.cli import cortex
from tests.support.sensors import evaluate

ASSETS = sorted(defs.resolve_asset_graph().get_all_asset_keys())
BUS = AssetKey("bus_messages")


def _instance(home: Path) -> DagsterInstance:
    return DagsterInstance.from_config(str(home / "dagster_home"))


def _run_ids(instance: DagsterInstance) -> list[str]:
    """Oldest first."""
    return [record.dagster_run.run_id for record in reversed(instance.get_run_records())]


def _files_of(home: Path, run_id: str) -> list[Path]:
    paths = [
        home / "dagster_home" / "history" / "runs" / f"{run_id}.db",
        home / "dagster_home" / "storage" / run_id,
    ]
    return [p for p in paths if p.exists()]


def _latest(instance: DagsterInstance) -> dict:
    """What the asset pages and the automation conditions read: each asset's latest
    materialization (storage id, run) and last run, and each check's latest evaluation."""
    latest = {}
    for record in instance.get_asset_records():
        entry = record.asset_entry
        mat = entry.last_materialization_record
        latest[entry.asset_key.to_user_string()] = (
            mat and (mat.storage_id, mat.run_id),
            entry.last_run_id,
        )
    checks = list(defs.resolve_asset_graph().asset_check_keys)
    for key, execution in instance.event_log_storage.get_latest_asset_check_execution_by_key(checks).items():
        latest[f"{key.asset_key.to_user_string()}.{key.name}"] = (execution.id, execution.run_id)
    return latest


def _assert_every_latest_still_there(instance: DagsterInstance) -> None:
    """Each asset's latest materialization is in its history too, and its run exists: the asset
    record and the event log agree (they would not, had its run been deleted)."""
    for record in instance.get_asset_records():
        entry = record.asset_entry
        if entry.last_materialization_record is None:
            continue
        key = entry.asset_key
        history = instance.fetch_materializations(key, limit=1).records
        assert history and history[0].storage_id == entry.last_materialization_storage_id, key
        assert instance.get_latest_materialization_event(key).run_id == history[0].run_id
        assert instance.has_run(history[0].run_id), key
    for run_id in holders_of_latest(instance):
        assert instance.has_run(run_id), run_id


def _requested(instance: DagsterInstance, start: datetime) -> list[str]:
    """What the automation sensor requests at its first tick past start (a :50 tick), carrying its
    cursor from a tick just before, as the daemon does."""
    first = evaluate_automation_conditions(defs=defs, instance=instance, evaluation_time=start)
    later = evaluate_automation_conditions(
        defs=defs, instance=instance, evaluation_time=start + timedelta(hours=1), cursor=first.cursor
    )
    return [key.to_user_string() for key in ASSETS if later.get_num_requested(key)]


def test_delete_run_alone_leaves_the_asset_record_pointing_at_a_run_that_is_gone(tmp_path):
    """Why retention keeps the runs holding an asset's latest (Dagster 1.13): `delete_run` removes
    the run's events, but the asset record still names the deleted materialization, the check's
    latest execution stays, and the per-run event-log file and compute logs stay on disk."""

    @asset
    def a():
        return 1

    @asset_check(asset=a)
    def a_ok():
        return AssetCheckResult(passed=True)

    (tmp_path / "dagster.yaml").write_text("")
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        older = materialize([a, a_ok], instance=instance).run_id
        newer = materialize([a, a_ok], instance=instance).run_id
        instance.delete_run(newer)
        assert not instance.has_run(newer)
        assert instance.get_latest_materialization_event(a.key).run_id == newer  # a run that is gone
        assert [r.run_id for r in instance.fetch_materializations(a.key, limit=5).records] == [older]
        check = AssetCheckKey(a.key, "a_ok")
        assert (
            instance.event_log_storage.get_latest_asset_check_execution_by_key([check])[check].run_id == newer
        )
        assert (tmp_path / "history" / "runs" / f"{newer}.db").exists()
        assert (tmp_path / "storage" / newer).exists()


@pytest.mark.soak
def test_cortex_run_prunes_old_runs_and_keeps_what_the_assets_need(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("send", "webchat", "I prefer window seats on long flights.", home=home)
    cortex("run", home=home)
    cortex("send", "webchat", "My sister is called Ana.", home=home)
    cortex("run", home=home)
    # Two processing runs, as `cortex dev` starts them: the first ingests a message itself (the
    # latest report of bus_messages), the second finds nothing (the newest run of its job).
    cortex("send", "webchat", "Remember that the gate code is 4417.", home=home)
    with _instance(home) as instance:
        job = defs.resolve_job_def("process_messages")
        for _ in range(2):
            assert job.execute_in_process(instance=instance, resources=cortex_resources(str(home))).success
        old = _run_ids(instance)[:2]
        ingested, idle = _run_ids(instance)[2:]
        assert instance.get_latest_materialization_event(BUS).run_id == ingested
        before = _latest(instance)
    assert all(_files_of(home, run_id) for run_id in old)

    ran = cortex("--now", "+1d", "run", home=home)  # nothing is 30 days old yet
    assert "pruned" not in ran.stdout
    with _instance(home) as instance:
        old.append(_run_ids(instance)[-1])
    ran = cortex("--now", "+40d", "run", home=home)
    assert "pruned 3 run(s) older than 30 days from Dagster's run history" in ran.stdout, (
        ran.stdout + ran.stderr
    )

    with _instance(home) as instance:
        kept = _run_ids(instance)
        assert kept[:2] == [ingested, idle] and len(kept) == 3  # and the run that just pruned
        for run_id in old:
            assert not instance.has_run(run_id)
            assert _files_of(home, run_id) == []
        _assert_every_latest_still_there(instance)
        assert instance.get_latest_materialization_event(BUS).run_id == ingested
        had = [name for name, (mat, _last) in before.items() if "." not in name and mat]
        assert BUS.to_user_string() in had and len(had) == len(ASSETS)
        assert all(instance.get_latest_materialization_event(AssetKey(name)) for name in had)
        # The automation sensor, ticking after the pruning, finds nothing new to run.
        assert _requested(instance, datetime.now(UTC) + timedelta(days=40, minutes=1)) == []
    state = json.loads(cortex("status", "--json", home=home).stdout)["run_history"]
    assert state["runs"] == 3 and state["keep_days"] == 30 and state["bytes"] > 0


def test_the_sensor_prunes_by_the_moved_clock_and_keeps_the_latest(settings, monkeypatch):
    home = str(settings.home)
    resources = cortex_resources(home)
    everything = [*ALL_ASSETS, *ALL_CHECKS]
    with _instance(settings.home) as instance:
        job = defs.resolve_job_def("process_messages")
        first_pm, last_pm = (
            job.execute_in_process(instance=instance, resources=resources).run_id for _ in range(2)
        )
        session = AssetSelection.assets("session_messages")
        superseded = materialize(everything, instance=instance, resources=resources, selection=session).run_id
        checks_only = materialize(
            everything,
            instance=instance,
            resources=resources,
            selection=AssetSelection.checks_for_assets(AssetKey("session_messages")),
        ).run_id
        asset_only = materialize(
            everything, instance=instance, resources=resources, selection=session.without_checks()
        ).run_id
        latest = _latest(instance)
        assert latest["session_messages"][0][1] == asset_only
        assert latest["session_messages.no_failed_messages"][1] == checks_only
        start = datetime.now(UTC) + timedelta(days=40, minutes=1)
        requested = _requested(instance, start)

        fresh = evaluate(run_history_retention, instance, home)
        assert fresh.skip_message.startswith("no finished run older than 30 days"), fresh.skip_message

        monkeypatch.setenv("CORTEX_NOW", "+40d")
        pruned = evaluate(run_history_retention, instance, home)
        assert pruned.skip_message.startswith("pruned 2 run(s) older than 30 days"), pruned.skip_message
        assert set(_run_ids(instance)) == {last_pm, checks_only, asset_only}
        for run_id in (first_pm, superseded):
            assert _files_of(settings.home, run_id) == []
        assert _latest(instance) == latest  # what the asset pages and automation read: unchanged
        _assert_every_latest_still_there(instance)
        assert _requested(instance, start) == requested

        again = evaluate(run_history_retention, instance, home)
        assert "no finished run older than 30 days to delete (3 kept" in again.skip_message

        monkeypatch.setenv("CORTEX_RUN_HISTORY_DAYS", "0")
        off = evaluate(run_history_retention, instance, home)
        assert "run-history retention is off" in off.skip_message


def test_a_run_not_finished_is_never_deleted_however_old(settings, monkeypatch):
    with _instance(settings.home) as instance:
        unfinished = {}
        for status in (  # QUEUED too is not finished; only SUCCESS, FAILURE and CANCELED ever go
            DagsterRunStatus.NOT_STARTED,
            DagsterRunStatus.STARTING,
            DagsterRunStatus.STARTED,
            DagsterRunStatus.CANCELING,
        ):
            run = instance.add_run(
                DagsterRun(job_name="process_messages", run_id=make_new_run_id(), status=status)
            )
            unfinished[run.run_id] = status
        # A finished run of the same job beside them (no end time recorded: its last update counts).
        failed = instance.add_run(
            DagsterRun(job_name="process_messages", run_id=make_new_run_id(), status=DagsterRunStatus.FAILURE)
        ).run_id
        newest = (
            defs.resolve_job_def("process_messages")
            .execute_in_process(instance=instance, resources=cortex_resources(str(settings.home)))
            .run_id
        )
        monkeypatch.setenv("CORTEX_NOW", "+400d")
        pruned = evaluate(run_history_retention, instance, str(settings.home))
        assert pruned.skip_message.startswith("pruned 1 run(s) older than 30 days"), pruned.skip_message
        assert not instance.has_run(failed)
        remaining = {run.run_id: run.status for run in instance.get_runs()}
    assert remaining == {**unfinished, newest: DagsterRunStatus.SUCCESS}
