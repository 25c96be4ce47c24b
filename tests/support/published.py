"""A short two-channel conversation, and materializing everything the published files come from."""

from __future__ import annotations

import json
from datetime import timedelta

from dagster import materialize

from cortex_pipelines.assets import ALL_ASSETS, ALL_CHECKS
from cortex_pipelines.ingest.inbox import ingest_path
from cortex_pipelines.resources import cortex_resources
from cortex_pipelines.storage import utcnow

MATERIALIZABLE = [a for a in ALL_ASSETS if a.key.path[0] != "bus_messages"]


def ingest_recent_history(settings, db, tmp_path, lines: list[tuple[str, str]]):
    """The turns as history, a minute apart, starting three hours ago."""
    path = tmp_path / "history.jsonl"
    start = utcnow() - timedelta(hours=3)
    rows = [
        {
            "channel": ch,
            "text": t,
            "sender": "maya",
            "external_id": f"h{n}",
            "timestamp": (start + timedelta(minutes=n)).isoformat() + "Z",
        }
        for n, (ch, t) in enumerate(lines)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert ingest_path(path, settings, db, history=True).accepted == len(rows)


CONVERSATION = [
    ("webchat", "My name is Maya Costa and I work as a freelance product designer."),
    ("telegram", "I prefer window seats on long flights."),
    ("webchat", "Back to the Helios redesign: we decided to go with Figma over Sketch."),
    ("webchat", "My goal is to ship the Helios redesign by December 15."),
    ("telegram", "Wir haben beschlossen, das Budget auf 5000 Euro zu erhöhen."),
]


def materialize_all(settings, instance):
    """Every asset but the inbox's, with its checks, as the UI's "Materialize all" would."""
    result = materialize(
        [*ALL_ASSETS, *ALL_CHECKS],
        instance=instance,
        selection=MATERIALIZABLE,
        resources=cortex_resources(str(settings.home)),
    )
    assert result.success
    return result


def published_bytes(settings) -> dict[str, bytes]:
    return {name: path.read_bytes() for name, path in settings.paths.published.items()}
