"""Every asset, check, job, schedule and sensor, written out as text and compared with
tests/snapshots/definitions.txt, so a wiring change shows in review as a diff of that file.

After an intended change: `UPDATE_SNAPSHOTS=1 pytest tests/integration/dagster/test_definitions_snapshot.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import AssetKey

from cortex_pipelines.definitions import defs

SNAPSHOT = Path(__file__).resolve().parents[2] / "snapshots" / "definitions.txt"


def _key(key: AssetKey) -> str:
    return key.to_user_string()


def _condition(condition) -> str:
    if condition is None:
        return "-"
    if condition.get_label():
        return condition.get_label()
    return f"{type(condition).__name__}({', '.join(_condition(c) for c in condition.children)})"


def render() -> str:
    graph = defs.resolve_asset_graph()
    lines = ["# assets"]
    for node in sorted(graph.asset_nodes, key=lambda n: _key(n.key)):
        lines.append(
            f"{_key(node.key)}: group={node.group_name} pools={sorted(node.pools or [])} "
            f"kinds={sorted(node.kinds)} code_version={node.code_version} "
            f"deps={sorted(_key(k) for k in node.parent_keys)} "
            f"automation={_condition(node.automation_condition)}"
        )
    lines.append("# checks")
    lines += sorted(f"{_key(k.asset_key)}.{k.name}" for k in graph.asset_check_keys)
    lines.append("# jobs")
    for job in sorted(defs.resolve_all_job_defs(), key=lambda j: j.name):
        if job.name.startswith("__"):
            continue
        selected = sorted(_key(k) for k in job.asset_layer.selected_asset_keys)
        lines.append(f"{job.name}: tags={dict(sorted(job.tags.items()))} assets={selected}")
    lines.append("# schedules")
    for sched in sorted(defs.schedules or [], key=lambda s: s.name):
        lines.append(f"{sched.name}: cron={sched.cron_schedule} default={sched.default_status.value}")
    lines.append("# sensors")
    for sensor in sorted(defs.sensors or [], key=lambda s: s.name):
        targets = sorted(t.job_name for t in sensor.targets) if sensor.targets else []
        lines.append(
            f"{sensor.name}: type={sensor.sensor_type.value} default={sensor.default_status.value} "
            f"interval_s={sensor.minimum_interval_seconds} jobs={targets}"
        )
    return "\n".join(lines) + "\n"


def test_definitions_match_the_snapshot():
    rendered = render()
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(rendered)
    assert SNAPSHOT.exists(), "no snapshot yet: run with UPDATE_SNAPSHOTS=1"
    assert rendered == SNAPSHOT.read_text(), (
        "the Dagster definitions changed; if intended, rerun with UPDATE_SNAPSHOTS=1 and commit "
        "tests/snapshots/definitions.txt"
    )
