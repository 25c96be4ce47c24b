"""Past conversations put into the session, as `cortex ingest --history` does."""

from __future__ import annotations

import json
from datetime import timedelta

from cortex_pipelines.ingest.inbox import ingest_path
from cortex_pipelines.storage import utcnow


def yesterday_morning() -> str:
    """Recent enough that a fact drawn from it starts hot (older ones start cold)."""
    return (utcnow() - timedelta(days=1)).strftime("%Y-%m-%dT09:00:00Z")


def ingest_history(settings, db, tmp_path, *turns: tuple, start: str | None = None):
    """Put past user turns into the session (no replies), as `cortex ingest --history` does. A turn is
    (channel, text), or (channel, text, fields) with more envelope fields (metadata, thread)."""
    path = tmp_path / f"history-{len(list(tmp_path.glob('history-*')))}.jsonl"
    base = json.dumps(start or yesterday_morning())[1:-1]
    lines = []
    for n, (channel, said, *more) in enumerate(turns):
        stamp = base.replace(":00:00Z", f":{n // 60:02d}:{n % 60:02d}Z")
        lines.append(
            json.dumps(
                {
                    "channel": channel,
                    "text": said,
                    "sender": "maya",
                    "external_id": f"{path.stem}-{n}",
                    "timestamp": stamp,
                    **(more[0] if more else {}),
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    report = ingest_path(path, settings, db, history=True)
    assert report.accepted == len(turns), report.files
    return [r[0] for r in db.query("SELECT id FROM session ORDER BY id")][-len(turns) :]
