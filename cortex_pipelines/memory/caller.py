"""Who asks memory control (memory/control.py) for something: the door a request came through, and
the defaults a door shows its user. Apart from control's operations, so the command line can name
them without loading what the operations need (numpy, pyarrow, polars)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cortex_pipelines.config import ADMIN_CHANNEL

DEDUPE_THRESHOLD = 0.95  # seed 002's default similarity for duplicates
MIN_DEDUPE_THRESHOLD = 0.5  # below this, facts are related, not the same: a merge would lose knowledge


@dataclass(frozen=True)
class Caller:
    """The door a request came through, kept in the audit trail. From the brain also the owner's
    turn that asked: a save keeps it as its source (from elsewhere the owner's words become a note)."""

    door: str  # cli | admin | brain
    turn: int | None = None
    channel: str = ADMIN_CHANNEL
    at: datetime | None = None
