"""The instance's one clock. `CORTEX_NOW` (or `cortex --now`) moves it, so a demo or a test can
let a reminder come due without waiting; time still runs forward from the moved instant."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta

_OFFSET = re.compile(r"^([+-])(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_anchors: dict[str, float] = {}


class ClockError(ValueError):
    """CORTEX_NOW is neither an ISO timestamp nor an offset like +2m."""


def parse_shift(value: str, real: datetime) -> float:
    """Seconds to add to the real time: '+90s', '-1h', '+2d', or an ISO timestamp to jump to."""
    value = value.strip()
    match = _OFFSET.match(value)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        return sign * float(match.group(2)) * _UNIT_S[match.group(3)]
    try:
        target = datetime.fromisoformat(value)
    except ValueError:
        raise ClockError(
            f"CORTEX_NOW: {value!r} is neither an ISO timestamp nor an offset like +2m, -1h, +3d"
        ) from None
    if target.tzinfo is None:
        target = target.replace(tzinfo=UTC)
    return (target - real).total_seconds()


def now() -> datetime:
    """Aware UTC now, moved by CORTEX_NOW when it is set."""
    real = datetime.now(UTC)
    value = os.environ.get("CORTEX_NOW")
    if not value:
        return real
    if value not in _anchors:  # an ISO instant is reached once, then time runs on from it
        _anchors[value] = parse_shift(value, real)
    return real + timedelta(seconds=_anchors[value])
