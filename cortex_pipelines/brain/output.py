"""Turn the model's final text into a routing decision (silence, reply, cross-channel send)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SILENT = ("NO_REPLY", "HEARTBEAT_OK")
_SEND_TO = re.compile(r"\[\[\s*send_to\s*:\s*([^\]\s]*)\s*\]\]", re.I)
_REPLY_CURRENT = re.compile(r"\[\[\s*reply_to_current\s*\]\]", re.I)
# Directives count only at the very start of the reply. Anywhere else they are text: a reply that
# quotes a user's message or a recalled memory containing "[[send_to:x]]" must not obey it.
_LEADING = re.compile(r"^(\s*\[\[\s*(send_to\s*:\s*[^\]\s]*|reply_to_current)\s*\]\])+", re.I)


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
    lead = _LEADING.match(text)
    head = lead.group(0) if lead else ""
    targets: list[str] = []
    for name in _SEND_TO.findall(head):
        if name.lower() not in targets:
            targets.append(name.lower())
    if _REPLY_CURRENT.search(head) and source_channel not in targets:
        targets.insert(0, source_channel)
    body = text[len(head) :].strip()
    if not body:
        return Output("", [], "empty")
    return Output(body, targets or [source_channel], None)


# Said after a reply the model stopped at its length limit (max_tokens): it had reached the user as if
# whole ("…you should bring your pass", QA helper-55).
CUT_SHORT = "\n\n(This reply was cut short at its length limit.)"


def marked_cut_short(output: Output) -> Output:
    """The output, saying it was cut short when there is text to send."""
    if output.silence is not None:
        return output
    return Output(output.text + CUT_SHORT, output.targets, None)
