"""Simple English reminder requests, for the offline provider: "remind me every Monday at 9 to send
my timesheet", "remind me tomorrow at 8am to call Anna", "in 2 hours remind me to stretch".

Only the shapes a demo needs are understood; anything else is left to a real model. The result is
a cron expression (recurring) or a local time (one-shot); cron and timezone math live elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CRON_DOW = {day: str((n + 1) % 7) for n, day in enumerate(_DAYS)}  # cron: 0 = Sunday
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "ten": 10, "fifteen": 15}
_UNITS = {"minute": "minutes", "min": "minutes", "hour": "hours", "day": "days", "week": "weeks"}

_CLOCK = r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?"
_TIME = r"(?:at\s+)?" + _CLOCK
_EVERY = re.compile(
    r"\bevery\s+(?P<what>day|weekday|morning|evening|hour|" + "|".join(_DAYS) + r")s?\b"
    r"(?:\s+" + _TIME + r")?",
    re.I,
)
_IN = re.compile(
    r"\bin\s+(?P<n>\d+|" + "|".join(_NUMBERS) + r")\s+(?P<unit>minute|min|hour|day|week)s?\b", re.I
)
_AT = re.compile(r"\b(?P<day>today|tomorrow|tonight)?\s*\bat\s+" + _CLOCK, re.I)
_DAY_ONLY = re.compile(r"\b(?P<day>tomorrow)\s+(?P<part>morning|evening)?", re.I)
# An explicit request only: "I go to the gym every day" is a fact, not a schedule.
_TRIGGER = re.compile(r"\b(remind|reminder|schedule)\b|^\s*every\s", re.I)
_LEAD = re.compile(r"^\s*(?:please\s+)?(?:can you\s+|could you\s+)?(?:remind me|set a reminder)\s*", re.I)
_TO = re.compile(r"^\s*(?:to|that|about|:|-)\s+", re.I)


@dataclass(frozen=True)
class ReminderRequest:
    task: str
    cron: str | None = None
    at: datetime | None = None  # local, aware

    @property
    def recurring(self) -> bool:
        return self.cron is not None


def _hour(match: re.Match, default: int) -> tuple[int, int] | None:
    if match.group("hour") is None:
        return default, 0
    hour, minute = int(match.group("hour")), int(match.group("minute") or 0)
    ampm = (match.group("ampm") or "").replace(".", "").lower()
    if ampm == "pm" and hour < 12:
        hour += 12
    elif ampm == "am" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59:
        return None
    return hour, minute


def _task(text: str, span: tuple[int, int]) -> str:
    rest = (text[: span[0]] + " " + text[span[1] :]).strip()
    rest = _LEAD.sub("", rest)
    rest = _TO.sub("", rest)
    rest = re.sub(r"\s+", " ", rest).strip(" .,!?;:")
    rest = re.sub(r"\b(to|at|on)$", "", rest).strip(" .,!?;:")
    return rest


def parse(text: str, now_local: datetime) -> ReminderRequest | None:
    """A reminder request in `text`, with times on the user's wall clock (`now_local`'s zone)."""
    if not _TRIGGER.search(text):
        return None
    if every := _EVERY.search(text):
        what = every.group("what").lower()
        if what == "hour":
            cron = "0 * * * *"
        else:
            default = {"morning": 8, "evening": 18}.get(what, 9)
            clock = _hour(every, default)
            if clock is None:
                return None
            dow = {"day": "*", "morning": "*", "evening": "*", "weekday": "1-5"}.get(what) or _CRON_DOW[what]
            cron = f"{clock[1]} {clock[0]} * * {dow}"
        task = _task(text, every.span())
        return ReminderRequest(task, cron=cron) if task else None
    if delay := _IN.search(text):
        raw = delay.group("n").lower()
        n = int(raw) if raw.isdigit() else _NUMBERS[raw]
        unit = _UNITS[delay.group("unit").lower()]
        task = _task(text, delay.span())
        at = now_local + timedelta(**{unit: n})
        # Schedules fire by the minute: the next whole one, never early ("in 2 minutes" asked at
        # 09:44:56 had fired at 09:46, 64 s later).
        on_the_minute = at.replace(second=0, microsecond=0)
        at = on_the_minute if on_the_minute == at else on_the_minute + timedelta(minutes=1)
        return ReminderRequest(task, at=at) if task else None
    if at := _AT.search(text):
        clock = _hour(at, 9)
        if clock is None:
            return None
        day = (at.group("day") or "").lower()
        when = now_local.replace(hour=clock[0], minute=clock[1], second=0, microsecond=0)
        if day == "tomorrow" or (not day and when <= now_local):
            when += timedelta(days=1)
        task = _task(text, at.span())
        return ReminderRequest(task, at=when) if task else None
    if day := _DAY_ONLY.search(text):
        hour = 18 if (day.group("part") or "").lower() == "evening" else 8
        when = now_local.replace(hour=hour, minute=0, second=0, microsecond=0) + timedelta(days=1)
        task = _task(text, day.span())
        return ReminderRequest(task, at=when) if task else None
    return None
