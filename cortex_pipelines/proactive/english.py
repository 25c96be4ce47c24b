"""Simple English reminder requests, for the offline provider: "remind me every Monday at 9 to send
my timesheet", "remind me tomorrow at 8am to call Anna", "remind me on March 3 at 10am to call the
dentist", "in 2 hours remind me to stretch", "remind me every 30 minutes to stretch", "remind me on
the 1st of every month at 9 to pay rent", "remind me every March 3 to renew the insurance".

Only explicit requests, in the shapes a demo needs, are understood; an explicit request it cannot
read raises Unreadable, so that the user is told; anything else is left to a real model. The result
is a cron expression (recurring) or a local time (one-shot); cron math lives in schedules.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY = "|".join(_DAYS)
_CRON_DOW = {day: (n + 1) % 7 for n, day in enumerate(_DAYS)}  # cron: 0 = Sunday
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "ten": 10}
_NUMBER = r"\d+|" + "|".join(_NUMBERS)
_EVERY_OTHER = ("other", "second", "2nd", "alternate")  # "every other day": a step of 2
_DAY_SECONDS = 86400
# "in …": seconds by the unit's first letter; days and weeks count on the wall clock.
_IN_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": _DAY_SECONDS, "w": 7 * _DAY_SECONDS}
# As far as `--now` may move the clock; much further and date arithmetic overflows ("in 99999999999
# weeks" had raised OverflowError and failed the message).
_FARTHEST_S = 1000 * 365 * _DAY_SECONDS
# Without a time of day: the part of the day named, else 09:00 (as "every Monday").
_PART_HOURS = {"morning": 8, "afternoon": 14, "evening": 18, "night": 20}
_DEFAULT_HOUR = 9
# "tonight at 1", "tonight at 12": a time of night before this hour is on the next calendar day; a
# bare hour at night from 1 to 5 is one of these small hours, 6 to 11 the evening's.
_NIGHT_ENDS = 6
_DAY_MINUTES = 24 * 60
_WEEK_MINUTES = 7 * _DAY_MINUTES
# By the unit's first letter: minutes, hours, days, weeks, fortnights.
_STEP_MINUTES = {"m": 1, "h": 60, "d": _DAY_MINUTES, "w": _WEEK_MINUTES, "f": 2 * _WEEK_MINUTES}
# Cron counts minutes within the hour and hours within the day: only these steps come round evenly.
_KEPT_STEPS = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60, 120, 180, 240, 360, 480, 720, _DAY_MINUTES)

_AMPM = r"(?P<ampm>[ap]\.?m\b\.?)"
_HOUR_MINUTE = r"(?P<hour>\d{1,2})(?:[:.](?P<minute>\d{2}))?"
_CLOCK_WORDS = {"quarter": 15, "half": 30, "five": 5, "ten": 10, "twenty": 20, "twenty-five": 25}
_HOUR_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven")
_HOUR_WORDS += ("twelve",)
_HOUR = rf"\d{{1,2}}|{'|'.join(_HOUR_WORDS)}"
# "quarter past 9", "half past six", "20 to 7", "ten past 8 pm": the minutes before or after an hour.
_SPOKEN_CLOCK = (
    rf"\b(?:at\s+)?(?P<spoken>quarter|half|twenty[\s-]five|five|ten|twenty|\d{{1,2}})(?:\s+minutes)?\s+"
    rf"(?P<side>past|after|to)\s+(?P<hour>{_HOUR}|noon|midnight)\b"
    rf"(?:\s*o['’]?clock\b)?(?:\s*{_AMPM})?"
)
# "at noon", "at 9", "at 9.30", "at 5 pm", "at 9 o'clock"; without "at" only with am/pm ("tomorrow
# 9am") or o'clock. First wins.
_CLOCKS = (
    re.compile(_SPOKEN_CLOCK, re.I),
    re.compile(rf"\b(?:at\s+)?(?P<hour>{_HOUR})\s*o['’]?clock\b(?:\s*{_AMPM})?", re.I),
    re.compile(r"\b(?:at\s+)?(?P<word>noon|midday|midnight)\b", re.I),
    re.compile(rf"\bat\s+{_HOUR_MINUTE}(?:\s*{_AMPM}|(?!\d|:\d))", re.I),  # "at 3pm: call mom"
    re.compile(rf"\b{_HOUR_MINUTE}\s*{_AMPM}", re.I),
)
_DAY_LIST = rf"(?:{_DAY})s?(?:\s*(?:,|&|\band\b)\s*(?:and\s+)?(?:{_DAY})s?)*"
# What may follow "daily", "hourly", "weekly" or "nightly" for it to say how a reminder repeats ("remind
# me daily at 8", "… to drink water hourly"), not name a thing ("my daily standup").
_ADVERB_ENDS = r"(?=\s*(?:[,.;:!?]|$|(?:on|at|in|to|that|about|from|between|remind|please|pls)\b))"
# "every 30 minutes", "every other day", "every 2 Mondays" (a step), named days and parts of the day,
# "on weekdays", "on weekends", and "daily", "hourly", "nightly", "weekly".
_EVERY = re.compile(
    r"\b(?:every\s+|on\s+(?=week(?:day|end)s\b))"
    rf"(?:(?P<n>{_NUMBER}|{'|'.join(_EVERY_OTHER)})\s*"
    rf"(?P<unit>minutes?|mins?|m|hours?|hrs?|h|days?|weeks?|fortnights?|(?:{_DAY})s?)\b"
    r"|(?P<half>half\s+(?:an\s+)?hour)\b"
    r"|(?P<what>day|weekday|weekend|morning|afternoon|evening|night|hour|hr|minute|min|week|fortnight)s?\b"
    rf"|(?P<days>{_DAY_LIST})\b)"
    rf"|\b(?P<adverb>daily|hourly|nightly|weekly){_ADVERB_ENDS}",
    re.I,
)
_ADVERBS = {"daily": "day", "hourly": "hour", "nightly": "night", "weekly": "week"}
# Weekdays or weekends only, said after "every day", "every morning", "every hour": "every day at 9
# on weekdays".
_ON_WEEK_PART = re.compile(r"\bon\s+(?P<which>week(?:day|end))s\b", re.I)
_WEEK_PARTS = {"weekday": {1, 2, 3, 4, 5}, "weekend": {6, 0}}
# The hours a step within the day keeps to: "every hour between 9 and 5", "every 30 minutes from 9am
# to 5pm".
_RANGE_HOUR = r"\d{1,2}(?::00)?|noon|midnight"
_HOURS = re.compile(
    rf"\b(?:between|from)\s+(?P<first>{_RANGE_HOUR})\s*(?P<first_ampm>[ap]\.?m\b\.?)?\s*"
    rf"(?:and|to|till|until|-)\s*(?P<last>{_RANGE_HOUR})\s*(?P<last_ampm>[ap]\.?m\b\.?)?",
    re.I,
)
# The days of "every week on Monday and Thursday".
_ON_DAYS = re.compile(rf"\b(?:on\s+)?(?P<days>{_DAY_LIST})\b(?!['’])", re.I)
_IN_UNIT = r"(?:seconds?|secs?|minutes?|mins?|hours?|hrs?|h|days?|weeks?)\b"
# A part of a span of time: "2 hours", "an hour and a half", "2 and a half days", "half an hour".
_AMOUNT = re.compile(
    rf"\b(?:(?P<n>{_NUMBER})(?P<and_half>\s+and\s+a\s+half)?|(?P<half>half(?:\s+an?)?|a\s+half))"
    rf"\s*(?P<unit>{_IN_UNIT})(?P<half_after>\s+and\s+a\s+half\b)?",
    re.I,
)
# "in 2 hours and 30 minutes", "in 1 hour 15 minutes": every part counts.
_IN = re.compile(rf"\bin\s+(?:(?:\s*,?\s*(?:and\s+|plus\s+)?)?{_AMOUNT.pattern})+", re.I)
# A part after the span that it could not read ("in 2 hours and fifteen minutes"): refused, not dropped.
_MORE = re.compile(rf"^\s*(?:,|and\b|plus\b|&)?\s*\S+\s+{_IN_UNIT}", re.I)
_PARTS = "morning|afternoon|evening|night"
_PART = rf"(?:\s+(?P<part>{_PARTS}))?"
# "tomorow" and "tommorow" too: a misspelt day must not end up in the reminder's text.
_RELATIVE_DAY = re.compile(
    rf"\b(?:(?P<day>today|tonight|tom+or+ow|tmrw)|this(?=\s+(?:{_PARTS})\b)){_PART}\b", re.I
)
_WEEKDAY = re.compile(rf"\b(?:(?:on|next|this)\s+)?(?P<weekday>{_DAY})\b(?!['’]s){_PART}", re.I)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_NAME = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_MONTH = rf"(?P<month>{_MONTH_NAME})\b\.?"
_MDAY = r"(?P<mday>\d{1,2})(?:st|nd|rd|th)?\b"
_YEAR = r"(?:,?\s+(?P<year>\d{4})\b)?"
_ON = r"\b(?:(?P<every>every|each)\s+|on\s+)"
# "March 3", "Dec 24th, 2026", "3 March", "the 3rd of March"; "on the 5th" is the next 5th. First wins.
_DATES = (
    re.compile(rf"{_ON}?{_MONTH}\s+(?:the\s+)?{_MDAY}{_YEAR}", re.I),
    re.compile(rf"{_ON}?(?:the\s+)?{_MDAY}\s+(?:of\s+)?{_MONTH}{_YEAR}", re.I),
    re.compile(rf"{_ON}(?:the\s+)?(?P<mday>\d{{1,2}})(?:st|nd|rd|th)\b", re.I),
)
# A repeating reminder goes on from now: one with a date besides ("every day until Dec 24", "on the 1st
# of every month from May 3") is refused, not set without it.
# An end or a start said without a day: "until June", "from next month", "starting tomorrow".
_BOUND = re.compile(
    rf"\b(?:until|till|from|starting)\s+(?:(?:the\s+)?(?:end\s+of\s+)?{_MONTH_NAME}\b|tomorrow\b"
    r"|next\s+(?:week|month|year)\b)",
    re.I,
)
_DATED_REPEAT = (
    'I can repeat a reminder on days of the week, as in "every Monday at 9", or on a day of every month '
    'or year, as in "on the 1st of every month at 9", but not until or from a date'
)
_FIRSTS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth")
_TEENS = ("tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth")
_TEENS += ("seventeenth", "eighteenth", "nineteenth")
_ORDINALS = dict(
    zip(
        (*_FIRSTS, *_TEENS, "twentieth", *(f"twenty{word}" for word in _FIRSTS), "thirtieth", "thirtyfirst"),
        range(1, 32),
        strict=True,
    )
)
# "twenty-first", "twenty first" and "twentyfirst" alike.
_ORDINAL = "|".join(re.sub("^(twenty|thirty)", r"\1[\\s-]?", word) for word in _ORDINALS)
_NTH = rf"(?:\d{{1,2}}(?:st|nd|rd|th)?|{_ORDINAL}|last)\b"
_NTHS = rf"{_NTH}(?:\s*(?:,|&|\band\b)\s*(?:and\s+)?(?:the\s+)?{_NTH})*"
# What may follow a day of the month, so that "on the first Monday", "focus on 2 goals" and "every 5th
# day" name none ("… on the 1st send me a summary" does).
_DAY_ENDS = (
    rf"(?=\s*(?:[,;!?&]|[.:](?!\d)|$|(?:days?\s+of|of|at|to|about|that|every|each|in|remind|monthly"
    rf"|{_MONTH_NAME}|[a-z]+\s+(?:me|us))\b))"
)
# A reminder that repeats by the calendar: "every month", "each year", "monthly", "annually", "every
# March 3", "every 5th"; "every 2 months" too, to refuse. "The monthly rent" and "every month's bill"
# say nothing of when.
# "the first Monday of every month", "the last Friday of the month": cron's "1#1" and "L5".
_WEEKDAY_NTHS = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4}
_WEEKDAY_OF_MONTH = re.compile(
    rf"\b(?:(?:on|every|each)\s+)?(?:the\s+)?(?P<nth>{'|'.join(_WEEKDAY_NTHS)}|last)\s+(?P<weekday>{_DAY})s?"
    rf"(?:\s+(?P<part>{_PARTS}))?\s+(?:of|in)\s+(?:every|each|the)\s+month\b(?!['’])",
    re.I,
)
_BY_DATE = re.compile(
    rf"\b(?:(?:every|each)\s+(?:(?P<n>{_NUMBER}|{'|'.join(_EVERY_OTHER)})\s+)?(?P<unit>month|year)s?\b(?!['’])"
    r"|(?P<adverb>monthly|yearly|annually)\b(?=\s*(?:[,.;:!?]|$|(?:on|at|to|about|that|in|remind)\b))"
    rf"|(?:every|each)\s+(?=(?:the\s+)?{_NTHS}{_DAY_ENDS}|(?P<month>{_MONTH_NAME})\b)"
    # Any month's: "on the 1st of the month", "the first Monday of the month".
    rf"|(?:(?:every|each)\s+)?(?:the\s+)?(?P<of_the_month>(?:{_NTHS}(?:\s+days?)?|(?:{'|'.join(_WEEKDAY_NTHS)}|last)\s+(?:{_DAY})s?"
    rf"(?:\s+(?:{_PARTS}))?)\s+(?:of|in)\s+the\s+month)\b(?!['’]))",
    re.I,
)
# The days of "on the 5th of every month", "every month on the first", "on the 1st and 15th", "the
# last day of each month", "monthly on 15".
_MONTH_DAYS = re.compile(
    rf"\b(?:on\s+(?:the\s+)?|(?:every|each)\s+(?:the\s+)?"
    rf"|the\s+(?={_NTHS}(?:\s+days?)?\s+of\s+(?:every|each|the)\s+month\b))"
    rf"(?P<days>{_NTHS}){_DAY_ENDS}(?:\s+days?)?(?:\s+of\s+(?:every|each|the)\s+month\b)?",
    re.I,
)
_MONTH_DAY = re.compile(rf"\d+|(?:{_ORDINAL}|last)\b", re.I)
_BY_DATE_EXAMPLES = {"month": "on the 1st of every month at 9", "year": "every March 3 at 9"}
# Past the 28th a day is not in every month: cron would skip those months without a word.
_IN_EVERY_MONTH = 28
# "in the evening", "at night": the hour of a repeating reminder without a time of day.
_PART_OF_DAY = re.compile(rf"\b(?:in\s+the|at)\s+(?P<part>{_PARTS})\b", re.I)
# The part of the day of the days a repeat names: "every Friday night", "every Monday morning".
_DAYS_PART = re.compile(rf"\s+(?P<part>{_PARTS})s?\b", re.I)
# The part of the day that reads a clock just before it: "at 1 at night", "at 7 in the evening".
_CLOCK_PART = re.compile(rf"\s+(?:in\s+the|at)\s+(?P<part>{_PARTS})\b", re.I)
# "on 3/4": which is the day and which the month cannot be told, so it is refused.
_NUMERIC_DATE = re.compile(r"\bon\s+\d{1,4}[/.-]\d{1,2}(?:[/.-]\d{2,4})?\b", re.I)
_YESTERDAY = re.compile(r"\byesterday\b(?!['’]s)", re.I)

# An explicit request only: "I go to the gym every day", "Every Monday I have yoga at 6pm" and
# "Thanks for the reminder at 5" tell, they ask for nothing; "remind me what moved to Friday" asks
# memory.
_REQUEST = re.compile(
    r"\b(?:remind\s+(?:me|us)|(?:don['’]?t|do\s+not)\s+let\s+(?:me|us)\s+forget)\b"
    r"(?!\s+(?:again\s+)?(?:what|when|where|who|whom|whose|which|how|why|whether|if)\b)"
    r"|\b(?:set|add|create|make|put|schedule)\s+(?:me\s+|up\s+)?(?:a\s+|an\s+)?reminder\b"
    r"|^\W*reminder\s*(?:[:\-–]|to\b)"
    r"|^\W*(?:please\s+)?(?:(?:can|could|would|will)\s+you\s+)?schedule\s+(?:a|an|me|my|the)\b",
    re.I,
)
# An alarm is a reminder with nothing more to say than "wake up" or "alarm", unless it says more.
# "set an alarm for 7am", "wake me up at 7"; not "set alarm system to away mode".
# The polite words a request may open with: "please", "can you", "ok so".
_POLITE = r"^\W*(?:(?:also|and|oh|hey|ok|okay|please|pls|can|could|would|will|you)\W+)*"
_ALARM = re.compile(
    rf"{_POLITE}(?:set\s+(?:me\s+)?(?:an?\s+)?alarm"
    r"(?=\s*(?:$|[,.!]|(?:for|at|tomorrow|tonight|every|on|in)\b|to\s+(?:wake|go\s+off)\b))"
    r"|(?P<wake>wake\s+(?:me|us)))\b",
    re.I,
)
# "set an alarm for 6:30": the time an alarm is set for, said with "for".
_ALARM_FOR = re.compile(
    r"\bfor\s+(?=\d{1,2}(?:[:.]\d{2})?(?:\s*[ap]\.?m\b)?(?!\s*(?:minutes?|mins?|hours?|hrs?)\b))", re.I
)
_PLEASE_AT_END = re.compile(r"[\s,]*\b(?:please|pls)\W*$", re.I)
# "Every weekday at 7:30 give me a morning briefing": a sentence that opens with "every" asks when
# the rest is addressed to Cortex.
_ADDRESSED = re.compile(r"^(?:please\s+)?[a-z]+\s+(?:me|us)\b", re.I)
_LEAD = re.compile(
    rf"{_POLITE}(?:(?:don['’]?t|do\s+not)\s+forget\s+to\s+)?"  # "don't forget to remind me to call mom"
    r"(?:remind\s+(?:me|us)|(?:don['’]?t|do\s+not)\s+let\s+(?:me|us)\s+forget"
    r"|(?:set|add|create|make|put|schedule)\s+(?:me\s+|up\s+)?(?:a\s+|an\s+)?"
    r"(?:reminder|alarm)(?:\s+for(?:\s+me)?)?|wake\s+(?:me|us)(?:\s+up)?|reminder|schedule)\b\W*",
    re.I,
)
# A time said just before or after "on weekdays": "at 9 on weekdays", "on weekdays at 10".
_CLOCK_BEFORE = re.compile(
    r"(?:\b\d{1,2}(?:[:.]\d{2})?\s*(?:[ap]\.?m\b\.?)?|\b(?:noon|midnight|o['’]?clock))\s*$", re.I
)
_CLOCK_AFTER = re.compile(r"\s*(?:at|from|between)\b", re.I)
# Words that report what someone is to be told: a repeat said after them is part of it.
_REPORTED = re.compile(
    r"\b(?:tell|telling|say|saying|ask|asking|mention|explain|let\s+\w+\s+know|remind\s+(?!me\b|us\b)\w+)\b",
    re.I,
)
# What makes the words someone is to be told a statement of their own: a verb like these ("the rent
# is due", "I'll be there"); "ask for a raise at 11am" has none, and its time is the reminder's.
_TOLD_CLAUSE = re.compile(
    r"\b(?:is|are|was|were|am|be|been|will|won't|would|can|can't|could|should|must|has|have|had|"
    r"isn't|aren't|wasn't|does|doesn't|did|didn't)\b"
    r"|\b(?:it|he|she|that|there|what|who|i|we|you|they)['’](?:s|re|ll|m|d|ve)\b",
    re.I,
)
_TO = re.compile(r"^\s*(?:to|that|about|of|:|-)\s+", re.I)
# The word that opens the reminder's own words after the request's: "remind me tomorrow at 9 that …".
_OPENS = re.compile(r"\b(?:to|that|about)\b|:(?!\d)", re.I)
# What may follow an "every …" that says when the reminder repeats ("… every day at 8", "… every
# day."); any other word makes it a part of the reminder's words ("… that every minute counts").
_REPEAT_ENDS = re.compile(
    r"\s*(?:[,.;!?]|$|(?:at|on|in|from|between|until|till|starting|for|and|or|please|pls)\b)", re.I
)
_TAIL = re.compile(r"\b(?:to|at|on|for|please|pls)$", re.I)


class Unreadable(ValueError):
    """An explicit reminder request this parser cannot keep; the message says why in a few words."""


@dataclass(frozen=True)
class ReminderRequest:
    task: str
    cron: str | None = None
    at: datetime | None = None  # on the wall clock of the zone parse() was given


def parse(text: str, now_local: datetime) -> ReminderRequest | None:
    """The reminder `text` asks for, or None when it asks for none. `now_local` (when the user asked)
    must carry a ZoneInfo: wall-clock math in a fixed offset put "tomorrow at 9" an hour off across a
    clock change. Raises Unreadable for a request it cannot read."""
    if alarm := _ALARM.match(text):
        text = _as_reminder(text, alarm)
    asked = alarm is not None or _REQUEST.search(text) is not None
    every, by_date = _EVERY.search(text), _BY_DATE.search(text)
    # The first said; at one place the longer ("every second Tuesday of the month" over "every second
    # Tuesday").
    repeats = min(filter(None, (every, by_date)), key=lambda m: (m.start(), -m.end()), default=None)
    if repeats is not None and _in_task(text, repeats):
        repeats = None
    if not asked and (repeats is None or text[: repeats.start()].strip()):
        return None
    if repeats is not None:  # the first that says so: "on the 1st of every month … every day's mail"
        if _starts(text, repeats):  # "remind me tomorrow to water the plants every day"
            raise Unreadable(_DATED_REPEAT)
        return _recurring(text, every, asked) if repeats is every else _by_date(text, by_date, asked)
    if delay := _IN.search(text, 0, _when_ends(text)):
        return _after(text, delay, now_local)
    return _one_shot(text, now_local)


def _as_reminder(text: str, alarm: re.Match) -> str:
    """An alarm as the reminder it is: "set an alarm for 7am" reminds of "alarm", "wake me up at 7"
    of "wake up", at 07:00 (a bare hour to wake at is the morning's), unless they say what for."""
    wake = alarm.group("wake") is not None
    text = _PLEASE_AT_END.sub("", _ALARM_FOR.sub("at ", text, count=1))  # "for 6:30" is "at 6:30"
    clock = _first_clock(text)
    if clock and not clock.groupdict().get("ampm") and not _CLOCK_PART.match(text, clock.end()):
        text = f"{text[: clock.end()]} in the morning{text[clock.end() :]}"
        clock = _first_clock(text)
    # The word that opens what it is for, outside the time ("for quarter to seven" opens nothing).
    opener = _OPENS.search(text, max(alarm.end(), clock.end() if clock else 0))
    return text if opener else f"{text} to {'wake up' if wake else 'alarm'}"


def _opens(text: str) -> int:
    """Where the reminder's own words open, after the request's ("remind me tomorrow at 9 | that …");
    the end of `text` when nothing opens them ("every weekday at 7 give me a briefing")."""
    lead = _LEAD.match(text)
    opens = _OPENS.search(text, lead.end() if lead else 0)
    return opens.start() if opens else len(text)


def _in_task(text: str, repeats: re.Match) -> bool:
    """Whether an "every …" is in the reminder's own words, not when it repeats: said after the word
    that opens its words, with more words after it, and after a time for one reminder ("remind me
    tomorrow at 9 that every minute counts", "remind me tomorrow to ask about every day deals") or
    as a step within the day, which would repeat all day long ("remind me that every minute
    counts"). At the end it says how the reminder repeats: "remind me at 9 to water the plants every
    day". The other ways to say a repeat ("daily", "on weekdays", "on the 1st of the month") are
    words, after a time for one reminder, in what someone is to be told ("remind me at 6pm to tell
    Bob that I run daily")."""
    opens = _opens(text)
    if repeats.start() < opens:
        return False
    timed = _timed(text[:opens])
    on_days = repeats.re is _EVERY and repeats.group(0)[:2].lower() == "on"
    if (
        on_days
        or (repeats.re is _EVERY and repeats.group("adverb"))
        or (repeats.re is _BY_DATE and repeats.group("of_the_month"))
    ):
        if timed and _REPORTED.search(text, opens, repeats.start()):
            return True
        # "on weekdays" in the words says when only beside a time: "to stand up at 9 on weekdays",
        # not "to plan what to do on weekends".
        return on_days and not (
            _CLOCK_BEFORE.search(text, 0, repeats.start()) or _CLOCK_AFTER.match(text, repeats.end())
        )
    if _REPEAT_ENDS.match(text, repeats.end()) is not None:
        return False
    within_the_day = repeats.re is _EVERY and (step := _step(repeats)) is not None and step < _DAY_MINUTES
    return within_the_day or timed


def _timed(said: str) -> bool:
    """Whether words say a day or a time."""
    return any(pattern.search(said) for pattern in (_RELATIVE_DAY, _WEEKDAY, _IN, *_DATES, *_CLOCKS))


def _when_ends(text: str) -> int:
    """Where the words that may say when a one-off reminder fires end: once the request has said a
    day or a time, one said in a statement someone is to be told is part of it ("remind me at 5pm
    to tell Ana the rent is due on the 1st" is for 17:00 today, "remind me tomorrow to tell Ana
    I'll be there in 10 minutes" for tomorrow), as is one in the statement "that" opens ("remind me
    at 9 that the rent is due on the 1st"). Without a statement of its own before it, the time is
    the reminder's: "remind me on Friday to ask for a raise at 11am", "remind me at 9 to call mum on
    Friday"."""
    opens = _opens(text)
    if opens == len(text) or not _timed(text[:opens]):
        return len(text)
    if text[opens:].lower().startswith("that"):
        told, cut = opens, opens
    elif reported := _REPORTED.search(text, opens):
        told, cut = reported.end(), reported.start()
    else:
        return len(text)
    said = [
        m.start() for p in (_RELATIVE_DAY, _WEEKDAY, _IN, *_DATES, *_CLOCKS) if (m := p.search(text, told))
    ]
    return cut if said and _TOLD_CLAUSE.search(text, told, min(said)) else len(text)


def _starts(text: str, repeats: re.Match) -> bool:
    """Whether the request says a day or a time for a repeating reminder to start, before its words
    open ("remind me tomorrow to water the plants every day", "remind me next Monday to run every
    day", "in 2 hours remind me to stretch every 30 minutes"): it goes on from now, so that is
    refused as a date is, never left in its text. A weekday names a weekly one's day ("remind me on
    Friday to call mum every week")."""
    lead = _LEAD.match(text)
    said = text[lead.end() if lead else 0 : min(_opens(text), repeats.start())]
    day = _RELATIVE_DAY.search(said)
    # A weekday names a weekly repeat's day, or a monthly one's ("the first Monday of every month").
    daily = repeats.re is _EVERY and _step(repeats) != _WEEK_MINUTES
    return bool((day and not _today(day)) or _IN.search(said) or (daily and _WEEKDAY.search(said)))


def _today(day: re.Match) -> re.Match | None:
    """`day` when it names today ("tonight", "this evening"): a repeat said to start today starts
    now, as every repeat does ("remind me tonight at 10 to take my pills every night")."""
    return day if (day.group("day") or "today").lower() in ("today", "tonight") else None


def _what(every: re.Match) -> str:
    """What an `_EVERY` match repeats on, by name: "day", "weekday", "morning" ("daily" is "day");
    "" for a step or named days."""
    if adverb := every.group("adverb"):
        return _ADVERBS[adverb.lower()]
    return (every.group("what") or "").lower()


def _said(every: re.Match) -> str:
    """The words of an `_EVERY` match, as a reply quotes them ("Every 2 days" mid-sentence)."""
    words = " ".join(every.group(0).split())
    return "every" + words[5:] if words.lower().startswith("every") else words


def _number(raw: str) -> int:
    if raw.lower() in _EVERY_OTHER:
        return 2
    return int(raw) if raw.isdigit() else _NUMBERS[raw.lower()]


def _first_clock(text: str) -> re.Match | None:
    """The time said first ("at 5pm to pick up Ana, her class ends at half past 6": 17:00), the
    longest reading where two start together ("at quarter past 9" over "at 9")."""
    found = [m for pattern in _CLOCKS for m in pattern.finditer(text) if _a_clock(m)]
    return min(found, key=lambda m: (m.start(), -m.end()), default=None)


def _a_clock(found: re.Match) -> bool:
    """Whether a match says a time: "N to H" only after "at", with "minutes" or as "quarter to H", since
    "work from 9 to 5" names no 16:51."""
    if (found.groupdict().get("side") or "").lower() != "to":
        return True
    said = found.group(0).lower()
    return said.startswith("at") or "minutes" in said or found.group("spoken").lower() == "quarter"


def _time_of_day(clock: re.Match) -> tuple[int, int, bool]:
    """(hour, minute, bare): bare is an hour from 1 to 11 without am/pm, which may mean either."""
    found = clock.groupdict()
    word = (found.get("word") or "").lower()
    if word:
        return (0 if word == "midnight" else 12), 0, False
    if found.get("spoken"):
        return _spoken_time(clock)
    hour, minute = _hour(clock.group("hour")), int(found.get("minute") or 0)
    ampm = (found.get("ampm") or "").replace(".", "").lower()
    if minute > 59 or hour > (12 if ampm else 23) or (ampm and hour == 0):
        said = clock.group("hour") + (f":{found['minute']}" if found.get("minute") else "")
        raise Unreadable(f"{said}{ampm} is not a time of day")
    if ampm:
        return hour % 12 + (12 if ampm == "pm" else 0), minute, False
    return hour, minute, 1 <= hour <= 11


def _hour(said: str) -> int:
    return int(said) if said.isdigit() else _HOUR_WORDS.index(said.lower()) + 1


def _spoken_time(clock: re.Match) -> tuple[int, int, bool]:
    """(hour, minute, bare) of "quarter past 9", "20 to 7", "half past noon": read as the hour is,
    then moved by the minutes ("quarter to 9" is as bare as "at 9": 08:45 or 20:45)."""
    said = clock.group("hour").lower()
    named = {"noon": 12, "midnight": 0}.get(said)
    spoken = re.sub(r"[\s-]", "-", clock.group("spoken").lower())
    minutes = _CLOCK_WORDS.get(spoken) or int(spoken)
    if not 0 < minutes < 60:
        raise Unreadable(f"{' '.join(clock.group(0).split())} is not a time of day")
    ampm = (clock.group("ampm") or "").replace(".", "").lower()
    hour = named if named is not None else _hour(said)
    if named is None and (hour > (12 if ampm else 23) or (ampm and hour == 0)):
        raise Unreadable(f"{' '.join(clock.group(0).split())} is not a time of day")
    if ampm:
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    # Said without am/pm, 1 to 12 may be either half of the day; so may what the minutes make of it.
    bare = named is None and not ampm and 1 <= hour <= 12
    at = (hour * 60 + (-minutes if clock.group("side").lower() == "to" else minutes)) % _DAY_MINUTES
    return at // 60, at % 60, bare and at // 60 < 12


def _task(text: str, *found: re.Match | None) -> str:
    """`text` without the time expressions `found` and the request's own words."""
    kept, start = [], 0
    for begin, end in sorted(m.span() for m in found if m):
        kept.append(text[start:begin])
        start = max(start, end)
    rest = " ".join([*kept, text[start:]])
    rest = re.sub(r"\s+", " ", rest).strip()
    rest = _TO.sub("", _LEAD.sub("", rest, count=1))
    rest = rest.strip(" .,!?;:")
    return _TAIL.sub("", rest).strip(" .,!?;:")


def _need(task: str) -> str:
    if not task:
        raise Unreadable("I couldn't tell what to remind you of")
    return task


def _recurring(text: str, every: re.Match, asked: bool) -> ReminderRequest | None:
    """A step within the day ("every 30 minutes") repeats by the clock; "every day", "every 24 hours"
    and "every week on Friday" at a time of day; a step cron cannot keep is refused, not rounded."""
    what = _what(every)
    step = _step(every)
    clock = None if step is not None and step < _DAY_MINUTES else _first_clock(text)
    weekly = _ON_DAYS.search(text) if step == _WEEK_MINUTES else None
    part = _CLOCK_PART.match(text, clock.end()) if clock else None  # "every day at 1 at night"
    if part is None and (every.group("days") or what in ("weekday", "weekend")):  # "every Friday night at 1"
        part = _DAYS_PART.match(text, every.end())
    within_the_day = step is not None and step < _DAY_MINUTES
    # "every day at 9 on weekdays", "every morning on weekends", "every hour on weekdays"
    week_part = _ON_WEEK_PART.search(text) if what in ("day", *_PART_HOURS) or within_the_day else None
    opens = _opens(text)  # "remind me tonight at 10 | to …"; nothing opens "every weekday … give me"
    # The hours before the reminder's words open, or right after the step: "every hour to say I'm free
    # between 2 and 4" keeps to no hours.
    hours = _HOURS.search(text) if within_the_day else None
    if hours and hours.start() >= opens and text[every.end() : hours.start()].strip():
        hours = None
    day = _RELATIVE_DAY.search(text, 0, opens) if opens < len(text) else None
    today = day and _today(day)  # starts now: not in its text
    task = _task(text, every, clock, weekly, part, today, week_part, hours)
    if not asked and not _ADDRESSED.match(task):
        return None
    if _date(text) or _BOUND.search(text):  # "every day until Dec 24": not from today on, unbounded
        raise Unreadable(_DATED_REPEAT)
    if step is not None and step != _DAY_MINUTES and not weekly:
        minute, hour, *_ = _step_cron(step, _said(every)).split()
        if hours:
            hour = _within(hours, step)
        dow = _dow(_WEEK_PARTS[week_part.group("which").lower()]) if week_part else "*"
        return ReminderRequest(_need(task), cron=f"{minute} {hour} * * {dow}")
    task = _need(task)
    said_part = part.group("part").lower() if part else what
    hour, minute = _repeating_time(clock, said_part)
    named = _WEEK_PARTS.get(week_part.group("which").lower() if week_part else what)
    if days := every.group("days") or (weekly and weekly.group("days")):
        named = {_CRON_DOW[d.lower()] for d in re.findall(_DAY, days, re.I)}
    if named and said_part == "night" and hour < _NIGHT_ENDS:  # Friday night's 01:00 is Saturday's
        named = {(d + 1) % 7 for d in named}
    return ReminderRequest(task, cron=f"{minute} {hour} * * {_dow(named) if named else '*'}")


def _dow(days: set[int]) -> str:
    """Cron's day-of-week field for these days, as people write it: "1-5" for weekdays."""
    said = ",".join(map(str, sorted(days)))
    return {"1,2,3,4,5": "1-5", "0,6": "6,0"}.get(said, said)


def _within(hours: re.Match, step: int) -> str:
    """Cron's hour field for a step kept between two hours: "9-17" every hour from 9 to 5 (its last at
    17:00), "9-16" every 30 minutes (its last at 16:30), "9-17/2" every two hours; across midnight
    "22-23,0-2". A bare hour is read as `_bare_hour` reads it; the end is the first after the start."""
    first = _range_hour(hours.group("first"), hours.group("first_ampm"), None)
    last = _range_hour(hours.group("last"), hours.group("last_ampm"), first)
    if first == last:
        raise Unreadable(f"{' '.join(hours.group(0).split())} is not a span of hours")
    if step < 60:
        last = (last - 1) % 24  # minutes within the last hour would run past its end
    every = f"/{step // 60}" if step > 60 else ""
    if first <= last:
        return f"{first}-{last}{every}"
    if every:
        raise Unreadable(f"{_every(step)} can't be kept across midnight; say every hour")
    head = f"{first}-23" if first < 23 else "23"
    return f"{head},0-{last}" if last else f"{head},0"


def _range_hour(said: str, ampm: str | None, after: int | None) -> int:
    """An hour of "between 9 and 5": with am/pm as said; a bare start as `_bare_hour` reads it; a bare
    end is the first of H and H+12 after the start."""
    if said.lower() in ("noon", "midnight"):
        return 12 if said.lower() == "noon" else 0
    hour = int(said.split(":")[0])
    ampm = (ampm or "").replace(".", "").lower()
    if hour > (12 if ampm else 23) or (ampm and hour == 0):
        raise Unreadable(f"{said}{ampm} is not a time of day")
    if ampm:
        return hour % 12 + (12 if ampm == "pm" else 0)
    if not 1 <= hour <= 12:
        return hour % 24
    if after is None:
        return _bare_hour(hour, "") if hour < 12 else 12
    return min((h for h in (hour % 12, hour % 12 + 12) if h > after), default=hour % 12)


def _by_date(text: str, period: re.Match, asked: bool) -> ReminderRequest | None:
    """A day of every month ("on the 5th of every month") or year ("every March 3") at a time of day:
    cron's day-of-month and month fields. A day not in every month or year is refused, not skipped
    where it is missing; so is a repeating reminder with no day, never set once instead."""
    dated = _date(text)
    named = dated if dated and dated.groupdict().get("month") else None  # a date with its month
    said = (period.group("unit") or period.group("adverb") or "").lower()
    yearly = said.startswith(("year", "annual")) or (not said and bool(named or period.group("month")))
    unit = "year" if yearly else "month"
    example = _BY_DATE_EXAMPLES[unit]
    days = None if yearly else _MONTH_DAYS.search(text)
    weekday = None if yearly else _WEEKDAY_OF_MONTH.search(text)
    clock, part = _first_clock(text), _PART_OF_DAY.search(text)
    task = _task(text, period, named if yearly else days, weekday, clock, part)
    if not asked and not _ADDRESSED.match(task):
        return None
    if period.group("n") and _number(period.group("n")) != 1:
        raise Unreadable(
            f"{' '.join(period.group(0).split())} can't be kept exactly: a repeating reminder comes back "
            f'every {unit} on the day it names; I can set one for every {unit}, as in "{example}"'
        )
    if yearly:
        if named is None:
            raise Unreadable(f'every year needs a date, as in "{example}"')
        fields = _yearly_date(named)
    elif named or _BOUND.search(text):  # "on the 1st of every month until Dec 24", "… until June"
        raise Unreadable(_DATED_REPEAT)
    elif weekday is not None:
        return _weekday_of_month(weekday, clock, part, _need(task))
    elif days is None:
        raise Unreadable(f'every month needs a day of the month, as in "{example}"')
    else:
        fields = ",".join(dict.fromkeys(map(_month_day, _MONTH_DAY.findall(days.group("days"))))) + " *"
    hour, minute = _repeating_time(clock, part.group("part").lower() if part else "")
    return ReminderRequest(_need(task), cron=f"{minute} {hour} {fields} *")


def _weekday_of_month(weekday: re.Match, clock: re.Match | None, part: re.Match | None, task: str):
    """ "The first Monday of every month" ("* * 1#1"), "the last Friday of the month" ("* * L5")."""
    said = (weekday.group("part") or (part.group("part") if part else "")).lower()
    hour, minute = _repeating_time(clock, said)
    dow, nth = _CRON_DOW[weekday.group("weekday").lower()], weekday.group("nth").lower()
    field = f"L{dow}" if nth == "last" else f"{dow}#{_WEEKDAY_NTHS[nth]}"
    return ReminderRequest(task, cron=f"{minute} {hour} * * {field}")


def _month_day(said: str) -> str:
    """Cron's day of the month for "5", "fifth", "twenty-first", "last"."""
    word = re.sub(r"[\s-]", "", said.lower())
    if word == "last":
        return "L"
    n = int(word) if word.isdigit() else _ORDINALS[word]
    if not 1 <= n <= 31:
        raise Unreadable(f"the {_nth(n)} is not a day of the month")
    if n > _IN_EVERY_MONTH:
        raise Unreadable(
            f'not every month has a {_nth(n)}; say "on the last day of every month" or "on the 28th of '
            'every month"'
        )
    return str(n)


def _yearly_date(named: re.Match) -> str:
    """Cron's day and month fields for "March 3"; a year said would end or start it, 29 February
    comes every fourth year."""
    said = re.sub(r"^(?:on|every|each)\s+", "", " ".join(named.group(0).split()), flags=re.I)
    if named.group("year"):
        raise Unreadable(_DATED_REPEAT)
    month, mday = _MONTHS.index(named.group("month")[:3].lower()) + 1, int(named.group("mday"))
    try:
        date(2000, month, mday)  # a leap year
    except ValueError:
        raise Unreadable(f"{said} is not a date") from None
    if (month, mday) == (2, 29):
        raise Unreadable(f'{said} comes only in leap years; say "every February 28" or "every March 1"')
    return f"{mday} {month}"


def _nth(n: int) -> str:
    return f"{n}{'th' if n % 100 in (11, 12, 13) else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _repeating_time(clock: re.Match | None, part: str) -> tuple[int, int]:
    """(hour, minute) of a repeating reminder: a bare hour read by `_bare_hour`, 12 at night is
    midnight; without a time, the part of the day's hour or 09:00."""
    hour, minute, bare = _time_of_day(clock) if clock else (_PART_HOURS.get(part, _DEFAULT_HOUR), 0, False)
    if bare:
        return _bare_hour(hour, part), minute
    if part == "night" and clock and _bare_twelve(clock):
        return 0, minute
    return hour, minute


def _step(every: re.Match) -> int | None:
    """Minutes from one reminder to the next ("every 30 minutes", "every other day", "every 2
    Mondays"); None for named days and parts of the day ("every Monday", "every evening")."""
    if every.group("half"):
        return 30
    what = _what(every)
    if every.group("unit"):
        n, unit = _number(every.group("n")), every.group("unit").lower()
    elif what in ("minute", "min", "hour", "hr", "week", "fortnight"):
        n, unit = 1, what
    else:
        return None
    return n * (_WEEK_MINUTES if unit.rstrip("s") in _DAYS else _STEP_MINUTES[unit[0]])


def _step_cron(step: int, said: str) -> str:
    """The cron for a step that divides the hour or the day. Any other step is refused with the
    nearest that can be kept: a 5-field cron has no period, so "*/3" in the day field restarts each
    month and "*/45" in the minute field fires at :00 and :45."""
    if step == 0:
        raise Unreadable(f"{said} is not an interval")
    if step < 60 and 60 % step == 0:
        return "* * * * *" if step == 1 else f"*/{step} * * * *"
    if step < _DAY_MINUTES and step % 60 == 0 and 24 % (step // 60) == 0:
        return "0 * * * *" if step == 60 else f"0 */{step // 60} * * *"
    if step == _WEEK_MINUTES:
        raise Unreadable(f'{said} needs a day of the week, as in "every Monday at 9"')
    if step % _WEEK_MINUTES == 0:
        raise Unreadable(
            f"{said} can't be kept exactly: a repeating reminder comes back every week on the days it "
            'names; I can set one for every week, as in "every Friday at 9"'
        )
    if step % _DAY_MINUTES == 0:
        raise Unreadable(
            f"{said} can't be kept exactly: a repeating reminder follows the calendar, where a "
            f"{step // _DAY_MINUTES}-day step would start over at every month's end; I can set one for "
            'every day or for named days, as in "every Monday and Thursday at 9"'
        )
    if step < 60:
        reason = "does not divide the hour"
    elif step % 60 == 0:
        reason = "does not divide the day"
    else:
        reason = "is not a whole number of hours"
    below = max(kept for kept in _KEPT_STEPS if kept < step)
    above = [kept for kept in _KEPT_STEPS if kept > step][:1]
    nearest = " or ".join(_every(kept) for kept in (below, *above))
    raise Unreadable(f"{said} {reason}, so it can't be kept exactly; say {nearest}")


def _every(step: int) -> str:
    if step == _DAY_MINUTES:
        return "every day"
    n, unit = (step, "minute") if step < 60 else (step // 60, "hour")
    return f"every {unit}" if n == 1 else f"every {n} {unit}s"


def _after(text: str, delay: re.Match, now_local: datetime) -> ReminderRequest:
    """The parts of the span add up ("in 2 hours and 30 minutes"): days and weeks on the wall clock,
    the rest as elapsed time."""
    if more := _MORE.match(text[delay.end() :]):
        raise Unreadable(f'I couldn\'t read "{delay.group(0)}{more.group(0)}" as a span of time')
    days, seconds = _span(delay.group(0))
    if days * _DAY_SECONDS + seconds > _FARTHEST_S:
        raise Unreadable("that is more than 1000 years away")
    clock = _first_clock(text) if days and not seconds else None
    task = _need(_task(text, delay, clock))
    if clock:  # "in 2 days at 9": that day's wall clock
        hour, minute, bare = _time_of_day(clock)
        hour = _bare_hour(hour, "") if bare else hour
        day = now_local.date() + timedelta(days=days)
        return ReminderRequest(task, at=_wall(day, hour, minute, now_local.tzinfo))
    # From the whole second: "in 10 minutes" sent at 09:00:00.3 is for 09:10, not 09:11.
    asked = now_local.replace(microsecond=0)
    at = asked + timedelta(days=days)  # the same wall-clock time, whatever clock change comes between
    if seconds:  # elapsed time: "in 2 hours" across a clock change is still two hours
        at = (at.astimezone(UTC) + timedelta(seconds=seconds)).astimezone(asked.tzinfo)
    # To the second, never early: cut to its minute, "in 2 minutes" asked at 09:44:56 had fired at
    # 09:46, 64 s later; rounded up to the next, "in 1 minute" took up to two (QA, helper-37).
    return ReminderRequest(task, at=at)


def _span(said: str) -> tuple[int, int]:
    """(days, seconds) of "2 hours and 30 minutes", "a week and a half": whole days and weeks stay
    days, half a day is 12 hours."""
    days = seconds = 0
    for amount in _AMOUNT.finditer(said):
        halves = 1 if amount.group("half") else 2 * _number(amount.group("n"))
        halves += 1 if amount.group("and_half") or amount.group("half_after") else 0
        unit = _IN_SECONDS[amount.group("unit")[0].lower()]
        if unit < _DAY_SECONDS:
            seconds += halves * unit // 2
        else:
            half_days = halves * unit // _DAY_SECONDS
            days, seconds = days + half_days // 2, seconds + half_days % 2 * _DAY_SECONDS // 2
    return days, seconds


def _one_shot(text: str, now_local: datetime) -> ReminderRequest:
    """A day and/or a time of day. A bare hour today (named or not) is the next of H:00 and H+12:00
    ("at 5" asked at noon is 17:00 today, at 18:00 it is 05:00 tomorrow); on a later day, or with a
    part of the day, it is read by `_bare_hour`. A night's small hours are the next day's: "tonight
    at 1" is 01:00 tomorrow, "tonight at 12" the coming midnight, "at 1 at night" the next 01:00. A
    date and a day named together must be the same day. Only what `_when_ends` leaves says when."""
    said = text[: _when_ends(text)]
    day = _RELATIVE_DAY.search(said) or _WEEKDAY.search(said)
    dated = _date(said)
    clock = _first_clock(said)
    if numeric := _NUMERIC_DATE.search(said):
        raise Unreadable(
            f'"{numeric.group(0)}" could be either of two days; name the month, as in "on March 3"'
        )
    if day is None and _YESTERDAY.search(said):  # "remind me yesterday at 5", not "…about yesterday's"
        raise Unreadable("yesterday is in the past")
    if day is None and dated is None and clock is None:
        raise Unreadable("I couldn't tell when")
    said_part = _CLOCK_PART.match(text, clock.end()) if clock else None  # "at 1 at night"
    task = _need(_task(text, day, dated, clock, said_part))
    found = {**(day.groupdict() if day else {}), **(said_part.groupdict() if said_part else {})}
    named = (found.get("day") or found.get("weekday") or ("today" if day else "")).lower()
    part = (found.get("part") or ("night" if named == "tonight" else "")).lower()
    if clock:
        hour, minute, bare = _time_of_day(clock)
        if bare and part:
            hour, bare = _bare_hour(hour, part), False
        elif part == "night" and _bare_twelve(clock):
            hour = 0
    elif part or named != "today":
        hour, minute, bare = _PART_HOURS.get(part, _DEFAULT_HOUR), 0, False
    else:
        raise Unreadable("I couldn't tell what time")

    today = now_local.date()
    later = None  # the day to fall back on once the time has passed; None: say it has passed
    if named in _DAYS:
        on = today + timedelta(days=(_DAYS.index(named) - today.weekday()) % 7)
        later = on + timedelta(days=7)
    elif named.startswith(("tom", "tmrw")):
        on = today + timedelta(days=1)
    else:
        on = today
        later = None if named else today + timedelta(days=1)  # "at 9", once passed: tomorrow's
    if dated:
        named_on, on, later = on, _calendar_day(dated, today), None
        if day and (on.weekday() != _DAYS.index(named) if named in _DAYS else on != named_on):
            raise Unreadable(f"{(found.get('weekday') or day.group(0)).strip()} is not {on.day} {on:%B}")
        named = f"on {on.day} {on:%B}"
    if part == "night" and hour < _NIGHT_ENDS and named:  # "at 1 at night": the next 01:00
        on, later = on + timedelta(days=1), later and later + timedelta(days=1)
    if bare and on > today:
        hour, bare = _bare_hour(hour, ""), False
    zone = now_local.tzinfo
    hours = (hour, hour + 12) if bare else (hour,)
    ahead = [moment for h in hours if (moment := _wall(on, h, minute, zone)) > now_local]
    if ahead:
        return ReminderRequest(task, at=ahead[0])
    if later is None:
        raise Unreadable(f"{hour:02d}:{minute:02d} {named} has already passed")
    if bare and named in _DAYS:  # next week's
        hour = _bare_hour(hour, "")
    return ReminderRequest(task, at=_wall(later, hour, minute, zone))


def _date(text: str) -> re.Match | None:
    """The date `text` names, by the first pattern that finds one ("March 3" before "on the 3rd")."""
    return next((m for pattern in _DATES if (m := pattern.search(text))), None)


def _calendar_day(dated: re.Match, today: date) -> date:
    """The day a date names: this year's, or next year's once it has passed ("on the 5th": the next
    5th, this month's or a later month's); a year said is kept."""
    said = re.sub(r"^on\s+", "", " ".join(dated.group(0).split()), flags=re.I)
    if dated.group("every"):  # "every 5th day": no day of the month, no step cron keeps
        raise Unreadable(_DATED_REPEAT)
    found = dated.groupdict()
    month = _MONTHS.index(found["month"][:3].lower()) + 1 if found.get("month") else None
    mday, year = int(found["mday"]), int(found.get("year") or 0)
    first = (year or today.year) * 12 + (0 if year else today.month - 1)
    for months in range(first, first + (12 if year else 12 * 9)):  # a 29 February within 8 years
        if month not in (None, months % 12 + 1):
            continue
        try:
            on = date(months // 12, months % 12 + 1, mday)
        except ValueError:  # 30 February, 31 April, a year past 9999
            continue
        if on >= today:
            break
        if year:
            raise Unreadable(f"{said} has already passed")
    else:
        raise Unreadable(f"{said} is not a date")
    if (on - today).days * _DAY_SECONDS > _FARTHEST_S:
        raise Unreadable("that is more than 1000 years away")
    return on


def _bare_twelve(clock: re.Match) -> bool:
    """12 without am/pm: at night it is midnight, not noon."""
    found = clock.groupdict()
    return found.get("hour") == "12" and not found.get("ampm")


def _bare_hour(hour: int, part: str) -> int:
    """An hour from 1 to 11 without am/pm where there is no "next" to go by (a later day, a recurring
    reminder, a part of the day): the morning keeps it, the afternoon and evening add 12, the night
    keeps its small hours ("tonight at 1" is 01:00) and adds 12 to 6 to 11 ("tonight at 11");
    otherwise 1 to 6 are the afternoon and evening ("tomorrow at 3" is 15:00), 7 to 11 the morning
    ("tomorrow at 9")."""
    if part == "morning" or (part == "night" and hour < _NIGHT_ENDS):
        return hour
    return hour + 12 if part in ("afternoon", "evening", "night") or hour <= 6 else hour


def _wall(day: date, hour: int, minute: int, zone) -> datetime:
    """That wall-clock time in `zone` (the first of a time the autumn change repeats)."""
    return datetime.combine(day, time(hour, minute), zone)
