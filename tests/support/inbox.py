"""Files dropped into the inbox as a connector would drop them."""

from __future__ import annotations

import json
from pathlib import Path

from cortex_pipelines.config import Settings


def drop(settings: Settings, channel: str, name: str, *messages: dict | str) -> Path:
    """Write a file into the inbox as a connector would (dicts become JSON, str is raw)."""
    folder = settings.paths.inbox / channel
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if len(messages) == 1 and isinstance(messages[0], str):
        path.write_text(messages[0])
    elif name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    else:
        path.write_text(json.dumps(messages[0]))
    return path


def msg(channel: str, text: str, ext: str, **extra) -> dict:
    return {"channel": channel, "text": text, "sender": "maya", "external_id": ext, **extra}
