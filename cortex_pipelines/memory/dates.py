"""Days and months a query names ("on 3 June, 2023", "in July 2022", "last May"), and past days it
names from today ("yesterday", "three days ago", "last Monday"): recall prefers what was said then.
Also the times a plan is said to be at (PLAN_TIME), for knowledge updates."""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

_MONTHS = "january february march april may june july august september october november december".split()
_MONTH = "(" + "|".join(_MONTHS) + ")"
MONTH_NAME = "(?:" + "|".join(_MONTHS) + ")"  # a pattern to build others with, any case when compiled so
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


_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_COUNTS = {w: n for n, w in enumerate("one two three four five six seven eight nine ten".split(), 1)}
# Days that are past whatever the sentence's tense ("yesterday"), and days that are past only in a
# question about the past ("what did I say this morning?", not "what should I cook this morning?").
_PAST_DAY = re.compile(
    r"\b(?:(?P<before>the day before yesterday)|(?P<yesterday>yesterday|last night)"
    r"|(?P<count>\d{1,2}|" + "|".join(_COUNTS) + r") days? ago"
    r"|last (?P<last>" + "|".join(_WEEKDAYS) + r")|(?P<last_week>last week)|(?P<weekend>last weekend))\b",
    re.I,
)
_DAY_IF_PAST = re.compile(
    r"\b(?:(?P<today>today|this morning|this afternoon|this evening|tonight)"
    r"|on (?P<on>" + "|".join(_WEEKDAYS) + r")|(?P<this_week>this week))\b",
    re.I,
)
_ASKS_ABOUT_THE_PAST = re.compile(
    r"\b(?:did|was|were|had|earlier|told|said|mentioned|talked|discussed|shared|wrote|asked)\b", re.I
)


def past_days(query: str, today: date) -> list[date]:
    """The past days a query names counting from `today` (the asker's local date): "yesterday",
    "last night", "the day before yesterday", "three days ago", "last Monday", "last week" (Monday
    to Sunday), "last weekend"; and, in a question about the past, "today", "this morning", "on
    Monday" (the latest Monday before today) or "this week" (Monday to today)."""
    monday = today - timedelta(days=today.weekday())
    days = []
    for m in _PAST_DAY.finditer(query):
        if m["before"]:
            days.append(today - timedelta(days=2))
        elif m["yesterday"]:
            days.append(today - timedelta(days=1))
        elif m["count"]:
            count = m["count"].lower()
            days.append(today - timedelta(days=int(count) if count.isdigit() else _COUNTS[count]))
        elif m["last_week"]:
            days += [monday - timedelta(days=n) for n in range(7, 0, -1)]
        elif m["weekend"]:
            days += [monday - timedelta(days=2), monday - timedelta(days=1)]
        else:
            days.append(_weekday_before(today, m["last"]))
    if _ASKS_ABOUT_THE_PAST.search(query):
        for m in _DAY_IF_PAST.finditer(query):
            if m["this_week"]:
                days += [monday + timedelta(days=n) for n in range((today - monday).days + 1)]
            else:
                days.append(today if m["today"] else _weekday_before(today, m["on"]))
    return list(dict.fromkeys(days))


def _weekday_before(today: date, name: str) -> date:
    back = (today.weekday() - _WEEKDAYS.index(name.lower())) % 7
    return today - timedelta(days=back or 7)


def utc_spans(days: list[date], zone: ZoneInfo) -> list[tuple[datetime, datetime]]:
    """The local days as [start, end) spans in naive UTC, as the database stores times; days in a
    row are one span ("last week" is one, not seven)."""

    def utc(day: date) -> datetime:
        return datetime.combine(day, time(), zone).astimezone(ZoneInfo("UTC")).replace(tzinfo=None)

    spans: list[tuple[date, date]] = []
    for day in sorted(set(days)):
        if spans and spans[-1][1] == day:
            spans[-1] = (spans[-1][0], day + timedelta(days=1))
        else:
            spans.append((day, day + timedelta(days=1)))
    return [(utc(start), utc(end)) for start, end in spans]


def within(at: datetime | None, spans: list[tuple[datetime, datetime]]) -> bool:
    return at is not None and any(start <= at < end for start, end in spans)


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
