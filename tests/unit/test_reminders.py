"""Reminders as users word them, read offline (proactive/english.py and the offline provider), and
cron firings around clock changes (proactive/schedules.py), on Europe/London's real wall clock:
clocks go forward on Sunday 29 March 2026 and back on Sunday 25 October 2026."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from cortex_pipelines.llm.base import LLMRequest, ToolSpec
from cortex_pipelines.llm.offline import OfflineClient
from cortex_pipelines.proactive import english, schedules

LONDON = ZoneInfo("Europe/London")


def _london(iso_utc: str) -> datetime:
    return datetime.fromisoformat(iso_utc).astimezone(LONDON)


SAT_NOON = _london("2026-03-28T12:00:00+00:00")  # the night before the spring change
SAT_AUTUMN = _london("2026-10-24T12:00:00+00:00")  # 13:00 BST, the day before the autumn change
FRI_NOON = _london("2026-03-27T12:00:00+00:00")  # a night with no clock change ahead
FRI_SMALL_HOURS = _london("2026-03-27T00:30:00+00:00")


@pytest.mark.parametrize(
    ("text", "now", "task", "at"),
    [
        # A clock change between now and then leaves the wall-clock time alone.
        ("remind me tomorrow at 9 to A", SAT_NOON, "A", "2026-03-29T09:00+01:00"),
        ("remind me tomorrow at 11am to A", SAT_NOON, "A", "2026-03-29T11:00+01:00"),
        ("remind me tomorrow at 9 to A", SAT_AUTUMN, "A", "2026-10-25T09:00+00:00"),
        # Elapsed time is elapsed: 00:30 GMT plus two hours is 03:30 BST.
        (
            "remind me in 2 hours to stretch",
            _london("2026-03-29T00:30:00+00:00"),
            "stretch",
            "2026-03-29T03:30+01:00",
        ),
        ("remind me in 2 hrs to check the oven", SAT_NOON, "check the oven", "2026-03-28T14:00+00:00"),
        ("remind me tonight at 8 to X", SAT_NOON, "X", "2026-03-28T20:00+00:00"),
        ("remind me at 9.30 to X", _london("2026-03-28T08:00:00+00:00"), "X", "2026-03-28T09:30+00:00"),
        ("remind me tomorow at 9 to buy milk", SAT_NOON, "buy milk", "2026-03-29T09:00+01:00"),
        # The clock as it is spoken: had been "I couldn't tell when".
        ("remind me at quarter past 9 to join the call", SAT_NOON, "join the call", "2026-03-28T21:15+00:00"),
        ("remind me at half past 6 to cook", SAT_NOON, "cook", "2026-03-28T18:30+00:00"),
        ("remind me tomorrow at quarter to 5 to leave", SAT_NOON, "leave", "2026-03-29T16:45+01:00"),
        ("remind me at 20 to 7 to leave", SAT_NOON, "leave", "2026-03-28T18:40+00:00"),
        ("remind me at ten past eight pm to call", SAT_NOON, "call", "2026-03-28T20:10+00:00"),
        ("remind me tomorrow at nine o'clock to call", SAT_NOON, "call", "2026-03-29T09:00+01:00"),
        ("remind me at quarter to 1 to eat", SAT_NOON, "eat", "2026-03-28T12:45+00:00"),
        ("remind me tonight at quarter to 12 to check", SAT_NOON, "check", "2026-03-28T23:45+00:00"),
        ("remind me tonight at quarter to 1 to check", SAT_NOON, "check", "2026-03-29T00:45+00:00"),
        ("remind me to stretch at quarter to ten", SAT_NOON, "stretch", "2026-03-28T21:45+00:00"),
        ("don't let me forget to call the vet at 3pm", SAT_NOON, "call the vet", "2026-03-28T15:00+00:00"),
        # A colon after the time, "don't forget to remind me", and alarms (had been "pm: call mom",
        # "don't forget to remind me to call mom", and "Noted.").
        ("remind me at 3pm: call mom", SAT_NOON, "call mom", "2026-03-28T15:00+00:00"),
        (
            "set a reminder for Friday at 3pm: submit expenses",
            SAT_NOON,
            "submit expenses",
            "2026-04-03T15:00+01:00",
        ),
        ("don't forget to remind me to call mom on Sunday", SAT_NOON, "call mom", "2026-03-29T09:00+01:00"),
        ("set an alarm for 7am", SAT_NOON, "alarm", "2026-03-29T07:00+01:00"),
        ("set an alarm for 7am to take the pills", SAT_NOON, "take the pills", "2026-03-29T07:00+01:00"),
        ("wake me up tomorrow at 6:30", SAT_NOON, "wake up", "2026-03-29T06:30+01:00"),
        ("wake me up at 7", SAT_NOON, "wake up", "2026-03-29T07:00+01:00"),
        ("set an alarm for quarter to seven", SAT_NOON, "alarm", "2026-03-29T06:45+01:00"),
        ("set an alarm for 6:30", SAT_NOON, "alarm", "2026-03-29T06:30+01:00"),
        ("Wake us up at 7 please", SAT_NOON, "wake up", "2026-03-29T07:00+01:00"),
        # The time said first is the reminder's; a later one, and a repeat in what someone is to be
        # told after a time for one reminder, are its words (review, helper-42).
        (
            "remind me at 5pm to pick up Ana, her class ends at half past 6",
            SAT_NOON,
            "pick up Ana, her class ends at half past 6",
            "2026-03-28T17:00+00:00",
        ),
        (
            "remind me at 8 to tell the team the 9 o'clock meeting moved",
            SAT_NOON,
            "tell the team the 9 o'clock meeting moved",
            "2026-03-28T20:00+00:00",
        ),
        (
            "remind me at 6pm to tell Bob that I run daily",
            SAT_NOON,
            "tell Bob that I run daily",
            "2026-03-28T18:00+00:00",
        ),
        (
            "remind me at 3pm to tell Ana we are open on weekends at 9",
            SAT_NOON,
            "tell Ana we are open on weekends at 9",
            "2026-03-28T15:00+00:00",
        ),
        # A day, a date or a time in what someone is to be told, or in the statement "that" opens,
        # after a time for the reminder, is its words: had been set for the 1st, for 15:00, and for
        # ten minutes from now (QA, helper-42).
        (
            "remind me at 5pm to tell Ana the rent is due on the 1st",
            SAT_NOON,
            "tell Ana the rent is due on the 1st",
            "2026-03-28T17:00+00:00",
        ),
        (
            "remind me at 9 that the rent is due on the 1st",
            SAT_NOON,
            "the rent is due on the 1st",
            "2026-03-28T21:00+00:00",
        ),
        (
            "remind me tomorrow to tell Ana the meeting is at 3",
            SAT_NOON,
            "tell Ana the meeting is at 3",
            "2026-03-29T09:00+01:00",
        ),
        (
            "remind me tomorrow to tell Ana I'll be there in 10 minutes",
            SAT_NOON,
            "tell Ana I'll be there in 10 minutes",
            "2026-03-29T09:00+01:00",
        ),
        (
            "remind me on Friday to tell Ana it's due tomorrow",
            SAT_NOON,
            "tell Ana it's due tomorrow",
            "2026-04-03T09:00+01:00",
        ),
        # Without a statement of its own in what is told, its time is the reminder's (review,
        # helper-53: these had fired at the 09:00 default).
        (
            "remind me on Friday to ask for a raise at 11am",
            SAT_NOON,
            "ask for a raise",
            "2026-04-03T11:00+01:00",
        ),
        (
            "remind me tomorrow to say thanks at lunch at 1pm",
            SAT_NOON,
            "say thanks at lunch",
            "2026-03-29T13:00+01:00",
        ),
        (
            "remind me on Monday to let Sam know about the party at 8pm",
            SAT_NOON,
            "let Sam know about the party",
            "2026-03-30T20:00+01:00",
        ),
        (
            "remind me tomorrow to email Ana, and tell her about the contract, at 3pm",
            SAT_NOON,
            "email Ana, and tell her about the contract",
            "2026-03-29T15:00+01:00",
        ),
        # Outside what is told, a later day or time still says when.
        ("remind me at 9 to call mum on Friday", SAT_NOON, "call mum", "2026-04-03T09:00+01:00"),
        (
            "remind me tomorrow to call the dentist at 3",
            SAT_NOON,
            "call the dentist",
            "2026-03-29T15:00+01:00",
        ),
        ("remind me that the rent is due on the 1st", SAT_NOON, "the rent is due", "2026-04-01T09:00+01:00"),
        (
            "remind me to tell Ana tomorrow at 9 that the rent is due",
            SAT_NOON,
            "tell Ana that the rent is due",
            "2026-03-29T09:00+01:00",
        ),
        # "on weekends" in the words, away from a time, and "9 to 5" name no repeat and no 16:51.
        (
            "remind me tomorrow at 9 to plan what to do on weekends",
            SAT_NOON,
            "plan what to do on weekends",
            "2026-03-29T09:00+01:00",
        ),
        (
            "remind me at 5 to ask about shifts on weekdays",
            SAT_NOON,
            "ask about shifts on weekdays",
            "2026-03-28T17:00+00:00",
        ),
        ("remind me in 20 minutes to go from 9 to 5", SAT_NOON, "go from 9 to 5", "2026-03-28T12:20+00:00"),
        # "daily" or "weekly" naming a thing is in the text, not a repeat.
        ("remind me about my daily standup at 9", SAT_NOON, "my daily standup", "2026-03-28T21:00+00:00"),
        (
            "remind me to do the weekly review on Friday",
            SAT_NOON,
            "do the weekly review",
            "2026-04-03T09:00+01:00",
        ),
        # A bare hour is the next of H:00 and H+12:00.
        ("remind me to call mom at 5", SAT_NOON, "call mom", "2026-03-28T17:00+00:00"),
        (
            "remind me to call mom at 5",
            _london("2026-03-28T18:00:00+00:00"),
            "call mom",
            "2026-03-29T05:00+01:00",
        ),
        ("remind me at 9 to water the plants", SAT_NOON, "water the plants", "2026-03-28T21:00+00:00"),
        (
            "remind me at noon to eat lunch",
            _london("2026-03-28T10:00:00+00:00"),
            "eat lunch",
            "2026-03-28T12:00+00:00",
        ),
        ("remind me at midnight to lock up", SAT_NOON, "lock up", "2026-03-29T00:00+00:00"),
        # On a later day 1 to 6 are the afternoon and evening, 7 to 11 the morning.
        ("remind me tomorrow at 3 to call Anna", SAT_NOON, "call Anna", "2026-03-29T15:00+01:00"),
        ("remind me this morning at 11 to x", SAT_NOON.replace(hour=10), "x", "2026-03-28T11:00+00:00"),
        ("remind me on friday to pay rent", SAT_NOON, "pay rent", "2026-04-03T09:00+01:00"),
        ("Reminder: pay rent on Friday at 5pm", SAT_NOON, "pay rent", "2026-04-03T17:00+01:00"),
        (
            "set a reminder for tomorrow at 3pm to call the bank",
            SAT_NOON,
            "call the bank",
            "2026-03-29T15:00+01:00",
        ),
        # Tonight's 12 is the coming midnight, and its small hours are the next day's.
        ("remind me tonight at 12 to lock up", SAT_NOON, "lock up", "2026-03-29T00:00+00:00"),
        ("remind me tonight at midnight to lock up", SAT_NOON, "lock up", "2026-03-29T00:00+00:00"),
        ("remind me at 12:30 tonight to lock up", SAT_NOON, "lock up", "2026-03-29T00:30+00:00"),
        ("remind me tonight at 1am to lock up", SAT_AUTUMN, "lock up", "2026-10-25T01:00+01:00"),
        ("remind me tomorrow night at 12 to lock up", SAT_NOON, "lock up", "2026-03-30T00:00+01:00"),
        ("remind me tonight at 11 to lock up", SAT_NOON, "lock up", "2026-03-28T23:00+00:00"),
        # At night a bare 1 to 5 is the small hours (had been 13:00 today), 6 to 11 the evening.
        (
            "remind me tonight at 1 to take the bins out",
            FRI_NOON,
            "take the bins out",
            "2026-03-28T01:00+00:00",
        ),
        (
            "remind me at 1 tonight to take the bins out",
            FRI_NOON,
            "take the bins out",
            "2026-03-28T01:00+00:00",
        ),
        (
            "remind me tonight at 4:45 to check the bread",
            FRI_NOON,
            "check the bread",
            "2026-03-28T04:45+00:00",
        ),
        ("remind me tonight at 6 to cook", FRI_NOON, "cook", "2026-03-27T18:00+00:00"),
        ("remind me tonight at 12 to lock up", FRI_NOON, "lock up", "2026-03-28T00:00+00:00"),
        ("remind me tomorrow night at 2 to x", SAT_NOON, "x", "2026-03-30T02:00+01:00"),
        ("remind me tomorrow at 11 at night to x", SAT_NOON, "x", "2026-03-29T23:00+01:00"),
        ("remind me on Friday night at 1 to x", SAT_NOON, "x", "2026-04-04T01:00+01:00"),
        # "at night" without a day is the next such time; "tonight" is the coming night's.
        ("remind me at 1 at night to x", FRI_NOON, "x", "2026-03-28T01:00+00:00"),
        ("remind me at 1 at night to x", FRI_SMALL_HOURS, "x", "2026-03-27T01:00+00:00"),
        ("remind me tonight at 1 to x", FRI_SMALL_HOURS, "x", "2026-03-28T01:00+00:00"),
        ("remind me at 3 in the morning to x", SAT_NOON, "x", "2026-03-29T03:00+01:00"),
        ("remind me at 7 in the evening to x", SAT_NOON, "x", "2026-03-28T19:00+00:00"),
        # An "every …" in the reminder's own words, after a time for one reminder, is not a repetition.
        (
            "remind me tomorrow at 9 that every minute counts",
            SAT_NOON,
            "every minute counts",
            "2026-03-29T09:00+01:00",
        ),
        (
            "remind me tomorrow to ask about every day deals",
            SAT_NOON,
            "ask about every day deals",
            "2026-03-29T09:00+01:00",
        ),
        (
            "remind me in 2 hours that every minute counts",
            SAT_NOON,
            "every minute counts",
            "2026-03-28T14:00+00:00",
        ),
        (
            "remind me on Monday to plan every day's work",
            SAT_NOON,
            "plan every day's work",
            "2026-03-30T09:00+01:00",
        ),
        (
            "remind me at 9 that every minute counts",
            SAT_NOON,
            "every minute counts",
            "2026-03-28T21:00+00:00",
        ),
        (
            "remind me tomorrow that every March is busy",
            SAT_NOON,
            "every March is busy",
            "2026-03-29T09:00+01:00",
        ),
        # A step within the day in its words, whenever the time is said (it had repeated all day).
        (
            "remind me to tell Sam tomorrow that every hour matters",
            SAT_NOON,
            "tell Sam that every hour matters",
            "2026-03-29T09:00+01:00",
        ),
    ],
)
def test_a_one_shot_reminder_is_set_for_the_time_the_user_means(text, now, task, at):
    wish = english.parse(text, now)
    assert wish is not None and wish.cron is None
    assert (wish.task, wish.at.isoformat(timespec="minutes")) == (task, at)


@pytest.mark.parametrize(
    ("text", "task", "cron"),
    [
        ("remind me every monday and friday at 8 to gym", "gym", "0 8 * * 1,5"),
        ("remind me every Monday, Wednesday and Friday at 7:15 to run", "run", "15 7 * * 1,3,5"),
        ("remind me every 2 hours to drink", "drink", "0 */2 * * *"),
        ("remind me every evening at 7 to cook", "cook", "0 19 * * *"),
        ("remind me every day at 5 to feed the cat", "feed the cat", "0 17 * * *"),
        ("every weekday at 7:30 give me a morning briefing", "give me a morning briefing", "30 7 * * 1-5"),
        # A step that divides the hour or the day repeats by the clock.
        ("remind me every 30 minutes to stretch", "stretch", "*/30 * * * *"),
        ("every 15 mins remind me to check the oven", "check the oven", "*/15 * * * *"),
        ("remind me every half hour to stretch", "stretch", "*/30 * * * *"),
        ("remind me every minute to breathe", "breathe", "* * * * *"),
        ("every 2 hours remind me to drink water", "drink water", "0 */2 * * *"),
        ("remind me every 120 minutes to drink", "drink", "0 */2 * * *"),
        ("remind me every other hour to drink", "drink", "0 */2 * * *"),
        ("remind me every 24 hours at 8 to take the pill", "take the pill", "0 8 * * *"),
        ("remind me every week on Friday at 5pm to send the report", "send the report", "0 17 * * 5"),
        ("remind me every night at 12 to lock up", "lock up", "0 0 * * *"),
        # At night a bare 1 to 5 is the small hours (had been 13:00), 6 to 11 the evening.
        ("remind me every night at 1 to lock up", "lock up", "0 1 * * *"),
        # A named night's small hours are the next day's, as a one-off's are ("on Friday night at 1"
        # is Saturday 01:00); "every Friday night at 1" had been Fridays at 13:00, "night" in its text.
        ("remind me every Friday night at 1 to check the server", "check the server", "0 1 * * 6"),
        ("remind me every Friday at 1 at night to x", "x", "0 1 * * 6"),
        ("remind me every Saturday night at 2 to x", "x", "0 2 * * 0"),
        ("remind me every Monday night at 10 to x", "x", "0 22 * * 1"),
        ("remind me every Friday evening at 7 to x", "x", "0 19 * * 5"),
        ("remind me every night at 6 to cook", "cook", "0 18 * * *"),
        ("remind me every night at 11 to lock up", "lock up", "0 23 * * *"),
        ("remind me every day at 1 at night to back up", "back up", "0 1 * * *"),
        ("remind me on the 1st of every month at 1 at night to x", "x", "0 1 1 * *"),
        # An "every …" that opens the request or ends it says how it repeats.
        ("remind me to stretch every 30 minutes", "stretch", "*/30 * * * *"),
        ("remind me to check the oven every 15 minutes please", "check the oven", "*/15 * * * *"),
        (
            "remind me every Monday at 9 to get the mail from the office",
            "get the mail from the office",
            "0 9 * * 1",
        ),
        ("remind me to take my pill every morning with water", "take my pill with water", "0 8 * * *"),
        ("remind me every Monday at 9 to prepare for tomorrow", "prepare for tomorrow", "0 9 * * 1"),
        ("remind me every day at 9 that each month matters", "each month matters", "0 9 * * *"),
        ("every weekday at 7 give me a morning briefing", "give me a morning briefing", "0 7 * * 1-5"),
        ("remind me at 9 to water the plants every day", "water the plants", "0 9 * * *"),
        ("remind me to prepare for tomorrow every Monday", "prepare for tomorrow", "0 9 * * 1"),
        ("remind me on Friday to call mum every week", "call mum", "0 9 * * 5"),
        # Said to start today, it starts now, as every repeat does: not refused as a later start.
        ("remind me tonight at 10 to take my pills every night", "take my pills", "0 22 * * *"),
        ("remind me today to drink water every hour", "drink water", "0 * * * *"),
        ("remind me tonight to take the pills every night", "take the pills", "0 20 * * *"),
        ("remind me this evening at 8 to stretch every evening", "stretch", "0 20 * * *"),
        ("remind me every day at 9 to plan today", "plan today", "0 9 * * *"),
        ("every weekday at 7 give me a briefing for today", "give me a briefing for today", "0 7 * * 1-5"),
        # Weekdays or weekends only, with "every" or without; had kept "on weekdays" in the text.
        ("remind me every day at 9 on weekdays to stand up", "stand up", "0 9 * * 1-5"),
        ("remind me on weekdays at 9 to stand up", "stand up", "0 9 * * 1-5"),
        ("remind me to stand up at 9 on weekdays", "stand up", "0 9 * * 1-5"),
        ("remind me on weekends at 10 to call dad", "call dad", "0 10 * * 6,0"),
        ("remind me every morning on weekdays to take vitamins", "take vitamins", "0 8 * * 1-5"),
        ("remind me every weekday morning to take vitamins", "take vitamins", "0 8 * * 1-5"),
        # "daily", "hourly", "nightly", "weekly" say how it repeats (had been "I couldn't tell when").
        ("remind me daily to drink water", "drink water", "0 9 * * *"),
        ("remind me to drink water hourly", "drink water", "0 * * * *"),
        ("remind me nightly at 10 to read", "read", "0 22 * * *"),
        ("remind me weekly on Friday at 5 to send the report", "send the report", "0 17 * * 5"),
        ("remind me every day at half past seven to meditate", "meditate", "30 7 * * *"),
        # A day of every month or year: cron's day-of-month and month fields.
        ("remind me on the 5th of every month at 9 to pay rent", "pay rent", "0 9 5 * *"),
        ("remind me on the last day of every month to file expenses", "file expenses", "0 9 L * *"),
        ("remind me every year on March 3 at 10 to call the dentist", "call the dentist", "0 10 3 3 *"),
        # Any month's day: "of the month" had been once, with "the month" in its text.
        ("remind me on the 1st of the month to pay rent", "pay rent", "0 9 1 * *"),
        ("remind me on the 15th of the month at 8 to pay the card", "pay the card", "0 8 15 * *"),
        ("remind me on the last day of the month to file expenses", "file expenses", "0 9 L * *"),
        # A weekday of every month (had been refused: "every month needs a day of the month").
        (
            "remind me on the first Monday of every month to review the budget",
            "review the budget",
            "0 9 * * 1#1",
        ),
        ("remind me on the first Monday of the month at 10 to plan", "plan", "0 10 * * 1#1"),
        (
            "remind me on the last Friday of every month to submit timesheets",
            "submit timesheets",
            "0 9 * * L5",
        ),
        ("remind me the second Tuesday of each month in the evening to go out", "go out", "0 18 * * 2#2"),
        ("remind me every second Tuesday of the month to x", "x", "0 9 * * 2#2"),
        # A step within the day kept between two hours, on weekdays or not.
        ("remind me every hour between 9 and 5 to drink water", "drink water", "0 9-17 * * *"),
        ("remind me every 30 minutes from 9am to 5pm to stretch", "stretch", "*/30 9-16 * * *"),
        (
            "remind me every hour from 10pm to 2am to check the server",
            "check the server",
            "0 22-23,0-2 * * *",
        ),
        ("remind me every 2 hours between 8 and 6 to stretch", "stretch", "0 8-18/2 * * *"),
        ("remind me every hour on weekdays to stand up", "stand up", "0 * * * 1-5"),
        ("remind me to call the office on weekdays at 10", "call the office", "0 10 * * 1-5"),
        ("remind me every day to work from 9 to 5", "work from 9 to 5", "0 9 * * *"),
        ("remind me every hour to say I'm free between 2 and 4", "say I'm free between 2 and 4", "0 * * * *"),
        ("remind me to drink water every hour between 9 and 5", "drink water", "0 9-17 * * *"),
        ("remind me every hour between 11pm and midnight to check", "check", "0 23,0 * * *"),
        ("remind me to take my pills daily", "take my pills", "0 9 * * *"),
        ("remind me hourly from 9 to 17 on weekdays to drink", "drink", "0 9-17 * * 1-5"),
        # Another way to ask.
        ("don't let me forget to take the bins out every Tuesday evening", "take the bins out", "0 18 * * 2"),
    ],
)
def test_a_recurring_reminder_gets_the_days_and_time_asked_for(text, task, cron):
    wish = english.parse(text, SAT_NOON)
    assert wish is not None and (wish.task, wish.cron, wish.at) == (task, cron, None)


@pytest.mark.parametrize(
    "text",
    [
        "Every Monday I have yoga at 6pm",
        "my work schedule starts at 9 tomorrow",
        "Thanks for the reminder at 5, it helped",
        "I go to the gym every day at 7",
        "remind me what moved to Friday",  # asks memory
        "Every 2 days I water the plants",
        "I stretch every 30 minutes",
        "I pay rent every month at 9",
        "I go to the gym daily at 7",
        "don't let me forget what she said",
        "I set an alarm for 7 every day",
        "set alarm system to away mode at 10pm",
    ],
)
def test_a_statement_or_a_question_that_names_a_time_sets_no_reminder(text):
    assert english.parse(text, SAT_NOON) is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("remind me in 99999999999 weeks to x", "that is more than 1000 years away"),
        ("every weekday at 25:00 remind me to bad", "25:00 is not a time of day"),
        # Never a different interval than asked: the nearest that can be kept, to say instead.
        (
            "remind me every 5 hours to drink",
            "every 5 hours does not divide the day.*say every 4 hours or every 6 hours$",
        ),
        (
            "remind me every 7 minutes to x",
            "every 7 minutes does not divide the hour.*say every 6 minutes or every 10",
        ),
        ("remind me every 45 minutes to x", "can't be kept exactly; say every 30 minutes or every hour$"),
        ("remind me every 90 minutes to x", "say every hour or every 2 hours$"),
        # Cron's day-of-month steps start over each month: named days or every day instead.
        (
            "remind me every 3 days at 9 to water",
            "every 3 days can't be kept exactly.*every day or for named days",
        ),
        ("every other day remind me to water", "every other day can't be kept exactly.*month's end"),
        ("remind me every 2 weeks to pay", 'every 2 weeks can\'t be kept exactly.*"every Friday at 9"'),
        ("remind me every other Monday to pay", "every other Monday can't be kept exactly"),
        ("remind me every fortnight on Friday to pay", "every fortnight can't be kept exactly"),
        ("remind me every week to call gran", "every week needs a day of the week"),
        ("remind me weekly to call gran", "weekly needs a day of the week"),
        ("remind me every 2 hours from 10pm to 2am to x", "every 2 hours can't be kept across midnight"),
        ("remind me every hour from 9 to 9am to x", "from 9 to 9am is not a span of hours"),
        ("remind me at 70 past 9 to x", "at 70 past 9 is not a time of day"),
        ("remind me at 24 o'clock to eat", "24 is not a time of day"),  # had raised IndexError
        ("remind me every month at 9 to pay rent", "every month needs a day of the month"),
        ("remind me every year at 9 to renew", "every year needs a date"),
        ("remind me to buy milk", "I couldn't tell when"),
        ("remind me that every minute counts", "I couldn't tell when"),  # not a reminder every minute
        # A repeating reminder goes on from now: one to start on a later day is refused, never set
        # with "tomorrow" in its text.
        ("remind me tomorrow to water the plants every day", "not until or from a date$"),
        ("remind me tomorrow to water the plants every day at 8", "not until or from a date$"),
        ("remind me tomorrow every day at 8 to water the plants", "not until or from a date$"),
        ("remind me in 2 hours to stretch every 30 minutes", "not until or from a date$"),
        ("in 2 hours remind me to stretch every 30 minutes", "not until or from a date$"),
        # An end or a start without a day is one too: it had been kept in the text ("until June to pay rent").
        ("remind me on the 1st of every month until June to pay rent", "not until or from a date$"),
        ("remind me every day until the end of March to stretch", "not until or from a date$"),
        ("remind me every day starting tomorrow to stretch", "not until or from a date$"),
        ("remind me next Monday to start running every day", "not until or from a date$"),
        ("remind me on Monday to take my pill every morning", "not until or from a date$"),
        ("remind me every week on Friday from next month to report", "not until or from a date$"),
        ("remind me at 5", "I couldn't tell what to remind you of"),
    ],
)
def test_a_request_that_cannot_be_kept_says_why(text, why):
    with pytest.raises(english.Unreadable, match=why):
        english.parse(text, SAT_NOON)


def _fires(cron: str, after: str, count: int) -> list[str]:
    moment, fires = datetime.fromisoformat(after), []
    for _ in range(count):
        moment = schedules.next_cron_fire(cron, "Europe/London", moment)
        fires.append(moment.astimezone(LONDON).isoformat(timespec="minutes"))
    return fires


@pytest.mark.parametrize(
    ("cron", "after", "fires"),
    [
        # 01:30 comes twice on 25 October: it fires at the first, once.
        ("30 1 * * *", "2026-10-24T12:00:00+00:00", ["2026-10-25T01:30+01:00", "2026-10-26T01:30+00:00"]),
        ("30 1 * * *", "2026-10-25T00:31:00+00:00", ["2026-10-26T01:30+00:00"]),
        # 01:30 never comes on 29 March: it fires once, at 02:00 BST.
        ("30 1 * * *", "2026-03-28T12:00:00+00:00", ["2026-03-29T02:00+01:00", "2026-03-30T01:30+01:00"]),
        # The last day of the month, and 29 February in a leap year, on the wall clock of the day.
        (
            "0 9 L * *",
            "2026-01-31T12:00:00+00:00",
            ["2026-02-28T09:00+00:00", "2026-03-31T09:00+01:00", "2026-04-30T09:00+01:00"],
        ),
        ("0 9 L 2 *", "2027-03-01T00:00:00+00:00", ["2028-02-29T09:00+00:00"]),
        ("0 10 3 3 *", "2026-03-28T12:00:00+00:00", ["2027-03-03T10:00+00:00", "2028-03-03T10:00+00:00"]),
        # An hourly job runs by the elapsed clock through the repeated hour, as cron does.
        (
            "0 * * * *",
            "2026-10-24T23:30:00+00:00",
            ["2026-10-25T01:00+01:00", "2026-10-25T01:00+00:00", "2026-10-25T02:00+00:00"],
        ),
    ],
)
def test_a_cron_job_fires_once_per_wall_clock_time_across_clock_changes(cron, after, fires):
    assert _fires(cron, after, len(fires)) == fires


SCHEDULE_CREATE = ToolSpec("schedule_create", "", {})


def _offline(text: str, now: str, sent_at: str | None = None):
    """The offline provider's first answer to `text`, with the hints the brain gives it."""
    hints = {"text": text, "now": now, "timezone": "Europe/London"}
    if sent_at:
        hints["sent_at"] = sent_at
    request = LLMRequest(system="", messages=[], tools=[SCHEDULE_CREATE], hints=hints)
    return OfflineClient().complete(request)


def test_the_offline_provider_schedules_on_the_zones_clock_from_when_the_user_asked():
    # The brain's "now" is an ISO time with a fixed offset (+00:00 before the spring change).
    (call,) = _offline("remind me tomorrow at 9 to A", "2026-03-28T12:00:00+00:00").tool_calls
    assert call.input["at"].startswith("2026-03-29T09:00:00+01:00")
    (call,) = _offline("remind me tomorrow at 9 to A", "2026-10-24T13:00:00+01:00").tool_calls
    assert call.input["at"].startswith("2026-10-25T09:00:00+00:00")
    # Sent at 09:00, read at 10:00: ten minutes from when it was sent.
    late = _offline(
        "remind me in 10 minutes to stretch", "2026-03-27T10:00:00+00:00", "2026-03-27T09:00:00+00:00"
    )
    assert late.tool_calls[0].input["at"].startswith("2026-03-27T09:10:00+00:00")
    # A sent time beyond now (a connector's clock running fast) counts from now.
    fast = _offline(
        "remind me in 10 minutes to stretch", "2026-03-27T10:00:00+00:00", "2026-03-27T11:00:00+00:00"
    )
    assert fast.tool_calls[0].input["at"].startswith("2026-03-27T10:10:00+00:00")


@pytest.mark.parametrize(
    ("text", "cron"),
    [
        ("remind me on the 1st of every month at 9 to pay rent", "0 9 1 * *"),
        ("remind me on the last day of every month at 6pm to file expenses", "0 18 L * *"),
        ("remind me every March 3 to renew the insurance", "0 9 3 3 *"),
    ],
)
def test_the_offline_provider_repeats_a_reminder_on_a_day_of_every_month_or_year(text, cron):
    (call,) = _offline(text, "2026-03-28T12:00:00+00:00").tool_calls
    assert (call.input.get("cron"), call.input.get("at")) == (cron, None)
    schedules.ScheduleRequest(**call.input)  # valid as the tool takes it


def test_a_long_reminder_keeps_its_whole_text_in_the_action():
    words = " ".join(f"word{n}" for n in range(60))
    (call,) = _offline(f"remind me tomorrow at 9 to {words}", "2026-03-28T12:00:00+00:00").tool_calls
    description = call.input["description"]
    assert len(description) <= schedules.DESCRIPTION_MAX and description.endswith("…")
    assert call.input["action"] == f"Remind the user: {words}."
    schedules.ScheduleRequest(**call.input)  # valid as the tool takes it
    firing = {"description": description, "action": call.input["action"]}
    reply = OfflineClient().complete(LLMRequest(system="", messages=[], hints={"schedule": firing}))
    assert reply.text == f"Reminder: {words}"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("remind me every 2 days to water", "every 2 days can't be kept exactly"),
        ("remind me every 45 minutes to stretch", "every 45 minutes does not divide the hour"),
        ("every weekday at 25:00 remind me to bad", "25:00 is not a time of day"),
        ("remind me tomorrow at 9 to " + "x" * 10_000, "its text is 10,000 characters long"),
        # Never set once, for tonight: "every month" needs its day.
        ("remind me every month at 9 to pay rent", "every month needs a day of the month"),
        ("remind me on the 31st of every month to pay rent", "not every month has a 31st"),
    ],
)
def test_a_reminder_request_the_offline_provider_cannot_keep_is_told_so(text, why):
    reply = _offline(text, "2026-03-28T12:00:00+00:00")
    assert not reply.tool_calls and reply.text.startswith(f"I haven't set a reminder: {why}")
    assert '"remind me tomorrow at 9 to …"' in reply.text


def test_a_question_that_opens_like_a_reminder_is_not_told_that():
    reply = _offline("remind me what my locker code is", "2026-03-28T12:00:00+00:00")
    assert not reply.tool_calls and "reminder" not in reply.text


@pytest.mark.parametrize(
    ("cron", "said"),
    [
        ("0 9 * * 1", "at 09:00, only on Monday"),
        ("0 20 * * *", "every day at 20:00"),
        ("*/30 * * * *", "every 30 minutes"),
        ("0 9 L * *", "at 09:00, on the last day of the month"),
        ("0 9 * * 1#1", "at 09:00, on the first Monday of the month"),
        ("0 9 * * L5", "at 09:00, on the last Friday of the month"),
        # Within hours: the last firing, not the end of its hour ("between 09:00 and 17:59"), and a
        # span across midnight as one.
        ("0 9-17 * * *", "every hour from 09:00 to 17:00"),
        ("*/30 9-16 * * 1-5", "every 30 minutes from 09:00 to 16:30, Monday through Friday"),
        ("0 8-20/2 * * *", "every 2 hours from 08:00 to 20:00"),
        ("0 22-23,0-2 * * *", "every hour from 22:00 to 02:00"),
        ("0 9,17 * * *", "every day at 09:00 and 17:00"),
        # A step cron restarts each hour or day: said in words it would be a promise cron breaks.
        ("*/45 * * * *", "by cron */45 * * * *"),
        ("*/90 * * * *", "by cron */90 * * * *"),
        ("0 */5 * * *", "by cron 0 */5 * * *"),
    ],
)
def test_a_repeating_reminder_is_said_in_words_only_when_the_words_are_true(cron, said):
    assert schedules.in_words(cron) == said


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ("please forget everything about me", True),
        ("Forget that I said that", True),
        ("Forget about it, let's go", False),  # had been told "Only the owner can make me forget things."
    ],
)
def test_a_stranger_is_told_only_the_owner_can_make_cortex_forget_only_when_they_ask_it(text, told):
    request = LLMRequest(
        system="", messages=[], tools=[], hints={"text": text, "now": "2026-03-28T12:00:00+00:00"}
    )
    reply = OfflineClient().complete(request).text
    assert (reply == "Only the owner can make me forget things.") == told, reply
