"""Turn the model's final text into a routing decision (silence, reply, cross-channel send)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SILENT = ("NO_REPLY", "HEARTBEAT_OK")
_SEND_TO = re.compile(r"\[\[\s*send_to\s*:\s*([^\]\s]*)\s*\]\]", re.I)
_REPLY_CURRENT = re.compile(r"\[\[\s*reply_to_current\s*\]\]", re.I)


@dataclass(frozen=True)
class Output:
    text: str
    targets: list[str] = field(default_factory=list)
    silence: str | None = None  # why nothing is sent: NO_REPLY, HEARTBEAT_OK or empty


def parse(raw: str, source_channel: str) -> Output:
    text = raw.strip()
    for token in _SILENT:
        if text == token or text.startswith(token + "\n") or text.startswith(token + " "):
            return Output("", [], token)
    targets: list[str] = []
    for name in _SEND_TO.findall(text):
        if name.lower() not in targets:
            targets.append(name.lower())
    if _REPLY_CURRENT.search(text) and source_channel not in targets:
        targets.insert(0, source_channel)
    body = _REPLY_CURRENT.sub("", _SEND_TO.sub("", text)).strip()
    if not body:
        return Output("", [], "empty")
    return Output(body, targets or [source_channel], None)
