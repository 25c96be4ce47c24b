"""Dagster's storage as the shipped dagster.yaml configures it (cortex_pipelines/dagster_storage.py)
keeps Dagster's files in Dagster's default places: an instance set up before it keeps its runs, their
event logs and its assets' materializations, and going back to Dagster's default loses nothing."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml
from dagster import AssetKey, DagsterEventType, DagsterInstance, asset, materialize

from cortex_pipelines.dagster_storage import CortexEventLogStorage, CortexRunStorage, CortexScheduleStorage

STORAGE_KEYS = ("run_storage", "event_log_storage", "schedule_storage")


@asset
def greeting() -> str:
    return "hello"


def _shipped() -> dict:
    return yaml.safe_load(resources.files("cortex_pipelines").joinpath("dagster.yaml").read_text())


def _instance(home, monkeypatch, config: dict) -> DagsterInstance:
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return DagsterInstance.get()


def _materialize(instance: DagsterInstance) -> str:
    return materialize([greeting], instance=instance).run_id


def test_runs_recorded_with_dagsters_default_storage_survive_the_switch_and_back(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    dagster_default = {k: v for k, v in _shipped().items() if k not in STORAGE_KEYS}

    with _instance(home, monkeypatch, dagster_default) as before:
        first = _materialize(before)

    with _instance(home, monkeypatch, _shipped()) as shipped:
        assert isinstance(shipped.run_storage, CortexRunStorage)
        assert isinstance(shipped.event_log_storage, CortexEventLogStorage)
        assert isinstance(shipped.schedule_storage, CortexScheduleStorage)
        assert shipped.get_run_by_id(first).is_success
        kinds = {e.dagster_event_type for e in shipped.all_logs(first) if e.is_dagster_event}
        assert DagsterEventType.ASSET_MATERIALIZATION in kinds and DagsterEventType.RUN_SUCCESS in kinds
        assert shipped.get_latest_materialization_event(AssetKey("greeting")).run_id == first
        second = _materialize(shipped)
        assert shipped.get_latest_materialization_event(AssetKey("greeting")).run_id == second

    with _instance(home, monkeypatch, dagster_default) as after:
        assert {r.run_id for r in after.get_runs()} == {first, second}
        assert after.get_latest_materialization_event(AssetKey("greeting")).run_id == second


def test_the_shipped_storage_without_dagster_home_says_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with pytest.raises(RuntimeError, match="DAGSTER_HOME is not set"):
        CortexRunStorage.from_config_value(None, {})
    explicit = CortexRunStorage.from_config_value(None, {"base_dir": str(tmp_path / "runs")})
    assert (tmp_path / "runs" / "runs.db").is_file() and explicit.get_runs() == []
