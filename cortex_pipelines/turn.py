"""One turn of the session, as every reader of the conversation sees it: the brain's context, fact
extraction, observations and the thread and decision trackers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Turn:
    """A message in the session: the user's or another sender's (role "user") or the agent's reply
    (role "assistant"); `ts` is naive UTC."""

    id: int
    role: str
    channel: str
    sender: str | None
    content: str
    ts: datetime
