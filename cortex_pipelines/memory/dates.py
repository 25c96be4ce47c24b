"""Days and months a query names ("on 3 June, 2023", "in July 2022", "last May"): recall prefers
what was said then. Also the times a plan is said to be at (PLAN_TIME), for knowledge updates."""

from __future__ import annotations

import re
from datetime import date, datetime

_MONTHS = "january february march april may june july august september october november december".split()
_MONTH = "(" + "|".join(_MONTHS) + ")"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+(\d{{4}})\b", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?(\d{{4}})\b", re.I)
_MONTH_ONLY = re.compile(r"\b(" + "|".join(m.capitalize() for m in _MONTHS) + r")\b")  # "may" is a verb
# A time a plan is set for: "the 21st", "Friday", "March" (capitalised: "may" is a verb), "7pm", "9:30",
# "tomorrow". A pattern to build others with, as updates.py does.
PLAN_TIME = (
    r"(?:\d{1,2}(?:st|nd|rd|th)\b|(?i:(?:mon|tues|wednes|thurs|fri|satur|sun)day)\b"
    r"|(?:" + "|".join(m.capitalize() for m in _MONTHS) + r")\b"
    r"|\d{1,2}(?::\d{2})?\s*(?i:am|pm)\b|\d{1,2}:\d{2}\b|(?i:tomorrow|tonight|next (?:week|month|year))\b)"
)


def named_times(query: str) -> list[tuple[int | None, int, int | None]]:
    """(year, month, day) for each day or month the query names; year or day is None when unsaid."""
    found: list[tuple[int | None, int, int | None]] = []
    taken: list[tuple[int, int]] = []

    def month(name: str) -> int:
        return _MONTHS.index(name.lower()) + 1

    for pattern in (_DAY_MONTH_YEAR, _MONTH_DAY_YEAR, _MONTH_YEAR, _MONTH_ONLY):
        for m in pattern.finditer(query):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue  # "3 June, 2023" is one day, not also a month
            taken.append(m.span())
            g = m.groups()
            if pattern is _DAY_MONTH_YEAR:
                found.append((int(g[2]), month(g[1]), int(g[0])))
            elif pattern is _MONTH_DAY_YEAR:
                found.append((int(g[2]), month(g[0]), int(g[1])))
            elif pattern is _MONTH_YEAR:
                found.append((int(g[1]), month(g[0]), None))
            else:
                found.append((None, month(g[0]), None))
    return found


def said_then(at: datetime | None, times: list[tuple[int | None, int, int | None]]) -> bool:
    """Whether a memory's time falls in a named month, or within a day of a named day."""
    if at is None:
        return False
    for year, month, day in times:
        if day is not None:
            try:
                if abs((at.date() - date(year, month, day)).days) <= 1:
                    return True
            except ValueError:
                continue  # "31 June"
        elif at.month == month and year in (None, at.year):
            return True
    return False
