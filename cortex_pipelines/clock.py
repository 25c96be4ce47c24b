"""The instance's one clock. `CORTEX_NOW` moves it, so a demo or a test can let a reminder come
due without waiting: an offset like `+2m` shifts the real time (which keeps running), an ISO 8601
timestamp pins it (tests). `cortex --now` turns either into an offset, so time runs on from it."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta

_OFFSET = re.compile(r"^([+-])(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Far enough for any demo; much further and date arithmetic overflows (+99999999d ended in an
# OverflowError traceback).
_MAX_SHIFT = timedelta(days=1000 * 365)


class ClockError(ValueError):
    """CORTEX_NOW is neither an ISO timestamp nor an offset like +2m."""


def _too_far(value: str) -> ClockError:
    return ClockError(f"CORTEX_NOW: {value[:40]!r} moves the clock more than 1000 years")


def _parse(value: str) -> timedelta | datetime:
    value = value.strip()
    if match := _OFFSET.match(value):
        seconds = float(match.group(2)) * _UNIT_S[match.group(3)]
        if seconds > _MAX_SHIFT.total_seconds():
            raise _too_far(value)
        return timedelta(seconds=-seconds if match.group(1) == "-" else seconds)
    try:
        pinned = datetime.fromisoformat(value)
    except ValueError:
        raise ClockError(
            f"CORTEX_NOW: {value[:40]!r} is neither an ISO timestamp nor an offset like +2m, -1h, +3d"
        ) from None
    pinned = pinned if pinned.tzinfo else pinned.replace(tzinfo=UTC)
    if abs(pinned - datetime.now(UTC)) > _MAX_SHIFT:
        raise _too_far(value)
    return pinned


def as_offset(value: str) -> str:
    """`--now` as an offset from the real time, so the moved clock keeps running."""
    parsed = _parse(value)
    if isinstance(parsed, datetime):
        parsed = parsed - datetime.now(UTC)
    return f"{parsed.total_seconds():+.3f}s"


def now() -> datetime:
    """Aware UTC now, moved by CORTEX_NOW when it is set."""
    real = datetime.now(UTC)
    value = os.environ.get("CORTEX_NOW")
    if not value:
        return real
    parsed = _parse(value)
    return real + parsed if isinstance(parsed, timedelta) else parsed.astimezone(UTC)
