"""What the admin chat shows of the Dagster instance: recent runs and how fresh each asset is.
It reads the instance's storage (as `dagster dev` writes it) and never starts anything."""

from __future__ import annotations

from datetime import UTC, datetime

from cortex_pipelines.config import Settings
from cortex_pipelines.storage.dagster_sqlite import open_instance


def dagster_overview(settings: Settings, runs: int = 5) -> dict:
    from dagster import AssetKey

    from cortex_pipelines.definitions import defs

    home = settings.paths.dagster_home
    if not (home / "dagster.yaml").is_file():
        return {"error": f"no Dagster instance at {home} (run `cortex init`)"}

    def stamp(ts: float | None) -> str | None:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None

    with open_instance(home) as instance:
        records = instance.get_run_records(limit=runs)
        recent = [
            {
                "run_id": r.dagster_run.run_id[:8],
                "job": r.dagster_run.job_name,
                "status": r.dagster_run.status.value,
                "started": stamp(r.start_time),
                "ended": stamp(r.end_time),
            }
            for r in records
        ]
        keys = [AssetKey(k.path) for k in defs.resolve_asset_graph().get_all_asset_keys()]
        latest = instance.get_latest_materialization_events(keys)
        freshness = {
            key.to_user_string(): stamp(event.timestamp) if event else None for key, event in latest.items()
        }
    return {"recent_runs": recent, "last_materialized": freshness}
