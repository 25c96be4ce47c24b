"""Reminder wordings the offline provider had read wrongly (QA): a calendar date was dropped and the
reminder set for tomorrow, "yesterday" was set for tomorrow, the second part of "in 2 hours and 30
minutes" was dropped, "what reminders do I have?" listed nothing and "delete the gym reminder"
cancelled nothing. Through the `cortex` CLI, on the job's wall clock; english.py's reading beside."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from cortex_pipelines.proactive import english
from tests.support.cli import cortex

LONDON = ZoneInfo("Europe/London")
# Saturday noon in London, the day before the clocks go forward; already Sunday 01:00 in Auckland.
SENT = "2026-03-28T12:00:00+00:00"
SAT_NOON = datetime.fromisoformat(SENT).astimezone(LONDON)


def _answer(home: Path, texts: list[str], sent: str = SENT, zone: str = "Europe/London") -> list[str]:
    """The replies to the owner's `texts`, sent together at `sent` and answered by `cortex run` then."""
    folder = home / "inbox" / "webchat"
    folder.mkdir(parents=True, exist_ok=True)
    before = len(_replies(home)) if (home / "cortex.duckdb").exists() else 0
    (folder / f"batch-{sent[:19].replace(':', '')}.jsonl").write_text(
        "".join(
            json.dumps({"channel": "webchat", "sender": "maya", "text": t, "timestamp": sent}) + "\n"
            for t in texts
        )
    )
    cortex("--now", sent, "run", home=home, env={"CORTEX_TIMEZONE": zone})
    return _replies(home)[before:]


def _replies(home: Path) -> list[str]:
    replies = json.loads(cortex("outbox", "webchat", "--json", home=home).stdout)
    return [r["text"] for r in sorted(replies, key=lambda r: r["reply_to"])]


def _jobs(home: Path) -> dict[str, tuple[str, str]]:
    jobs = json.loads(cortex("schedules", "--json", home=home).stdout)
    return {j["description"]: (j["when"], j["next_fire"]) for j in jobs}


def _ids(home: Path) -> dict[str, str]:
    return {j["description"]: j["id"] for j in json.loads(cortex("schedules", "--json", home=home).stdout)}


@pytest.mark.timeout(600)
def test_a_reminder_on_a_calendar_date_is_set_for_that_day(tmp_path):
    """A date already past this year is next year's (and the confirmation says which year); "the
    5th" is the next 5th; a date that is no day, or is not the weekday named with it, sets nothing."""
    home = tmp_path / "home"
    replies = _answer(
        home,
        [
            "remind me on March 3 at 10am to call the dentist",
            "remind me on the 5th at 9 to pay the card",
            "remind me at 5:30pm on Dec 24 to wrap gifts",
            "remind me on 3 April to renew the passport",
            "remind me on Saturday, April 3 at 9 to book the car",
            "remind me on Feb 30 to pay the rent",
        ],
    )
    assert _jobs(home) == {
        "call the dentist": ("once", "2027-03-03T10:00+00:00"),
        "pay the card": ("once", "2026-04-05T09:00+01:00"),  # summer time by then
        "wrap gifts": ("once", "2026-12-24T17:30+00:00"),
        "renew the passport": ("once", "2026-04-03T09:00+01:00"),
    }
    assert "call the dentist — next Wed 03 Mar 2027 at 10:00" in replies[0]
    assert "pay the card — next Sun 05 Apr at 09:00" in replies[1]
    assert replies[4].startswith("I haven't set a reminder: Saturday is not 3 April.")
    assert replies[5].startswith("I haven't set a reminder: Feb 30 is not a date.")


@pytest.mark.timeout(600)
def test_a_day_or_time_in_what_someone_is_to_be_told_is_part_of_it(tmp_path):
    """Said after the reminder's own time, "on the 1st" and "in 10 minutes" in what Ana is to be
    told had set the reminders for 1 April and for 12:10 today (QA, helper-42); a time after "ask"
    with no statement told is still the reminder's (review, helper-53)."""
    home = tmp_path / "home"
    _answer(
        home,
        [
            "remind me at 5pm to tell Ana the rent is due on the 1st",
            "remind me tomorrow to tell Bo I'll be there in 10 minutes",
            "remind me at 9 to call mum on Friday",
            "remind me on Friday to ask for a raise at 11am",  # no statement told: its own time
        ],
    )
    assert _jobs(home) == {
        "tell Ana the rent is due on the 1st": ("once", "2026-03-28T17:00+00:00"),
        "tell Bo I'll be there in 10 minutes": ("once", "2026-03-29T09:00+01:00"),
        "call mum": ("once", "2026-04-03T09:00+01:00"),
        "ask for a raise": ("once", "2026-04-03T11:00+01:00"),
    }


@pytest.mark.timeout(600)
def test_a_calendar_date_is_a_day_in_the_jobs_time_zone(tmp_path):
    """At 12:00 UTC on 28 March it is already the 29th in Auckland: "the 29th" is today there, and
    28 March has passed for this year."""
    home = tmp_path / "home"
    _answer(
        home,
        ["remind me on the 29th at 9pm to pay the rent", "remind me on March 28 at 10am to call Mum"],
        zone="Pacific/Auckland",
    )
    assert _jobs(home) == {
        "pay the rent": ("once", "2026-03-29T21:00+13:00"),
        "call Mum": ("once", "2027-03-28T10:00+13:00"),
    }


@pytest.mark.soak
@pytest.mark.timeout(600)
def test_a_reminder_on_a_day_of_every_month_or_year_repeats(tmp_path):
    """A day of the month or year repeats on it ("every month at 9" had been set once, for tonight,
    with "every month" in its text, and "on the 5th of every month" refused); a repeating reminder
    with no day, or with a day not in every month or year, sets nothing."""
    home = tmp_path / "home"
    replies = _answer(
        home,
        [
            "remind me on the 5th of every month at 9 to pay rent",
            "remind me on the last day of every month at 6pm to file expenses",
            "remind me every March 3 to renew the insurance",
            "remind me every year on 24 December at 7pm to wrap gifts",
            "remind me every month at 9 to water the ferns",
            "remind me every year at 9 to book the boiler service",
            "remind me on the 31st of every month to back up",
            "remind me every Feb 29 to celebrate",
        ],
    )
    assert _jobs(home) == {
        "pay rent": ("cron 0 9 5 * *", "2026-04-05T09:00+01:00"),
        "file expenses": ("cron 0 18 L * *", "2026-03-31T18:00+01:00"),
        "renew the insurance": ("cron 0 9 3 3 *", "2027-03-03T09:00+00:00"),
        "wrap gifts": ("cron 0 19 24 12 *", "2026-12-24T19:00+00:00"),
    }
    # Confirmed and listed in words, not as the cron ("repeating (cron 0 9 5 * *)").
    assert "pay rent — next Sun 05 Apr at 09:00 Europe/London, repeating at 09:00, on day 5 of" in replies[0]
    assert "repeating at 18:00, on the last day of the month, to webchat" in replies[1]
    assert "repeating at 09:00, on day 3 of the month, only in March, to webchat" in replies[2]
    listed = cortex("schedules", home=home).stdout
    assert "at 19:00, on day 24 of the month, only in December (cron 0 19 24 12 *)  → webchat" in listed
    assert replies[4].startswith(
        "I haven't set a reminder: every month needs a day of the month, as in \"on the 1st of every "
        'month at 9".'
    )
    assert replies[5].startswith(
        'I haven\'t set a reminder: every year needs a date, as in "every March 3 at 9".'
    )
    assert replies[6].startswith("I haven't set a reminder: not every month has a 31st;")
    assert replies[7].startswith("I haven't set a reminder: Feb 29 comes only in leap years;")
    # The last day of the month is April's 30th next.
    assert "Reminder: file expenses" in cortex("--now", "2026-03-31T17:00:10Z", "run", home=home).stdout
    assert _jobs(home)["file expenses"] == ("cron 0 18 L * *", "2026-04-30T18:00+01:00")


@pytest.mark.timeout(600)
def test_a_reminder_for_yesterday_is_refused(tmp_path):
    home = tmp_path / "home"
    replies = _answer(
        home,
        ["remind me yesterday at 5 to water plants", "remind me at 5 to talk about yesterday's game"],
    )
    assert replies[0].startswith("I haven't set a reminder: yesterday is in the past.")
    assert _jobs(home) == {"talk about yesterday's game": ("once", "2026-03-28T17:00+00:00")}


@pytest.mark.soak
@pytest.mark.timeout(600)
def test_a_span_of_time_in_parts_adds_up(tmp_path):
    """Every part counts, from when the message was sent; a part it cannot read sets nothing."""
    home = tmp_path / "home"
    replies = _answer(
        home,
        [
            "remind me in 2 hours and 30 minutes to leave work",
            "remind me in 1 hour 15 minutes to call Anna",
            "remind me in an hour and a half to stretch",
            "remind me in 2 hours and fifteen minutes to check the oven",
        ],
    )
    assert _jobs(home) == {
        "leave work": ("once", "2026-03-28T14:30+00:00"),
        "call Anna": ("once", "2026-03-28T13:15+00:00"),
        "stretch": ("once", "2026-03-28T13:30+00:00"),
    }
    assert replies[3].startswith(
        "I haven't set a reminder: I couldn't read \"in 2 hours and fifteen minutes\" as a span of time."
    )
    early = cortex("--now", "2026-03-28T14:29:00Z", "run", home=home).stdout
    assert "leave work" not in early
    assert "Reminder: leave work" in cortex("--now", "2026-03-28T14:30:10Z", "run", home=home).stdout


@pytest.mark.timeout(600)
def test_an_every_in_the_reminders_words_and_a_small_hour_tonight(tmp_path):
    """ "every minute" in what to be reminded of had set a reminder every minute, "tonight at 1" had
    been 13:00 today and "every night at 1" 13:00 daily; a repeating reminder to start tomorrow is
    refused, never set with "tomorrow" in its text."""
    home = tmp_path / "home"
    replies = _answer(
        home,
        [
            "remind me tomorrow at 9 that every minute counts",
            "remind me tomorrow to ask about every day deals",
            "remind me tonight at 1 to take the bins out",
            "remind me every night at 1 to lock the back door",
            "remind me tomorrow to water the plants every day",
        ],
        sent="2026-03-27T12:00:00+00:00",  # a Friday: no clock change that night
    )
    assert _jobs(home) == {
        "every minute counts": ("once", "2026-03-28T09:00+00:00"),
        "ask about every day deals": ("once", "2026-03-28T09:00+00:00"),
        "take the bins out": ("once", "2026-03-28T01:00+00:00"),
        "lock the back door": ("cron 0 1 * * *", "2026-03-28T01:00+00:00"),
    }
    assert replies[4].startswith("I haven't set a reminder: I can repeat a reminder on days of the week")
    assert "not until or from a date." in replies[4]


@pytest.mark.timeout(600)
def test_the_clock_as_spoken_a_weekday_of_the_month_and_hours_of_the_day(tmp_path):
    """ "quarter past 9" and "daily" had been "I couldn't tell when", "the first Monday of every
    month" was refused, "on weekdays" and "between 9 and 5" were kept in the reminder's text and
    "on the 1st of the month" was set once. Set, confirmed in words, and fired on its day."""
    home = tmp_path / "home"
    replies = _answer(
        home,
        [
            "remind me at quarter past 9 to join the call",
            "remind me on the first Monday of every month at 10 to review the budget",
            "remind me every hour between 9 and 5 on weekdays to drink water",
            "don't let me forget to pay rent on the 1st of the month",
            "remind me daily to stretch",
        ],
    )
    assert _jobs(home) == {
        "join the call": ("once", "2026-03-28T21:15+00:00"),
        "review the budget": ("cron 0 10 * * 1#1", "2026-04-06T10:00+01:00"),
        "drink water": ("cron 0 9-17 * * 1-5", "2026-03-30T09:00+01:00"),
        "pay rent": ("cron 0 9 1 * *", "2026-04-01T09:00+01:00"),
        "stretch": ("cron 0 9 * * *", "2026-03-29T09:00+01:00"),
    }
    assert "repeating at 10:00, on the first Monday of the month, to webchat" in replies[1]
    assert "repeating every hour from 09:00 to 17:00, Monday through Friday, to webchat" in replies[2]
    fired = cortex("--now", "2026-04-06T09:00:10Z", "run", home=home).stdout
    assert "Reminder: review the budget" in fired
    assert _jobs(home)["review the budget"] == ("cron 0 10 * * 1#1", "2026-05-04T10:00+01:00")


@pytest.mark.timeout(600)
def test_all_reminders_are_cancelled_at_once_and_a_stranger_is_told_they_are_the_owners(tmp_path):
    """ "delete all my reminders" had answered "You have no such reminder", "never mind the reminder
    about Carla" and "set an alarm for 7am" were "Noted." with nothing done, "at 3pm: call mom" fired
    as "pm: call mom"; a stranger's reminder request, and their request to forget, were "Noted." and
    the owner's admin commands."""
    home = tmp_path / "home"
    owner = {"CORTEX_OWNERS": "webchat:maya"}
    _answer(
        home,
        [
            "remind me every Monday at 7 to go to the gym",
            "remind me tomorrow at 8 to call Carla",
            "remind me at 3pm: call mom",
            "set an alarm for 7am",
        ],
    )
    assert _jobs(home) == {
        "go to the gym": ("cron 0 7 * * 1", "2026-03-30T07:00+01:00"),
        "call Carla": ("once", "2026-03-29T08:00+01:00"),
        "call mom": ("once", "2026-03-28T15:00+00:00"),
        "alarm": ("once", "2026-03-29T07:00+01:00"),
    }
    ids = _ids(home)
    (reply,) = _answer(home, ["never mind the reminder about Carla"], sent="2026-03-28T12:05:00+00:00")
    assert reply == f"Deleted {ids['call Carla']}." and "call Carla" not in _jobs(home)

    inbox = home / "inbox" / "webchat"
    asked = ["remind me every day at 9 to send bitcoin to eve", "what reminders do I have?"]
    asked.append("please forget everything about me")
    (inbox / "eve.jsonl").write_text(
        "".join(
            json.dumps(
                {"channel": "webchat", "sender": "eve", "text": t, "timestamp": "2026-03-28T12:06:00Z"}
            )
            + "\n"
            for t in asked
        )
    )
    cortex("--now", "2026-03-28T12:06:00Z", "run", home=home, env=owner)
    told = [r for r in _replies(home) if r.startswith("Only the owner")]
    assert told == [
        "Only the owner can set, list or cancel reminders here.",
        "Only the owner can set, list or cancel reminders here.",
        "Only the owner can make me forget things.",
    ]
    assert len(_jobs(home)) == 3

    # Mere mentions delete nothing (they had deleted every reminder, review helper-42).
    _answer(
        home,
        ["Stop, all my reminders are fine", "Forget about the party, but keep all my reminders"],
        sent="2026-03-28T12:08:00+00:00",
    )
    assert len(_jobs(home)) == 3
    replies = _answer(home, ["delete all my reminders"], sent="2026-03-28T12:10:00+00:00")
    assert sorted(replies[0].splitlines()) == sorted(
        f"Deleted {ids[name]}." for name in ("go to the gym", "call mom", "alarm")
    )
    assert _jobs(home) == {}


@pytest.mark.soak
@pytest.mark.timeout(600)
def test_in_one_minute_fires_a_minute_later_not_at_the_next_whole_minute_after_it(tmp_path):
    """Rounded up to a whole minute, "in 1 minute" asked at 12:00:40 was due 12:02 (QA, helper-37)."""
    home = tmp_path / "home"
    _answer(home, ["remind me in 1 minute to stretch"], sent="2026-03-28T12:00:40+00:00")
    assert "stretch" not in cortex("--now", "2026-03-28T12:01:39Z", "run", home=home).stdout
    assert "Reminder: stretch" in cortex("--now", "2026-03-28T12:01:41Z", "run", home=home).stdout


@pytest.mark.timeout(600)
def test_asking_which_reminders_there_are_lists_them(tmp_path):
    home = tmp_path / "home"
    _answer(home, ["remind me tomorrow at 8 to call Anna", "remind me every Monday at 7 to go to the gym"])
    ids = _ids(home).values()
    asked = ["what reminders do I have?", "which reminders are set", "do I have any reminders?"]
    for reply in _answer(home, asked, sent="2026-03-28T12:05:00+00:00"):
        assert reply.startswith("Your schedules:") and all(i in reply for i in ids), reply


@pytest.mark.timeout(600)
def test_a_reminder_is_cancelled_by_what_it_is_about(tmp_path):
    """The one active reminder the words name is deleted; several are listed to pick one by id; none
    is said, and nothing else is touched."""
    home = tmp_path / "home"
    _answer(
        home,
        [
            "remind me every Monday at 7 to go to the gym",
            "remind me tomorrow at 8 to clean the kitchen",
            "remind me tomorrow at 9 to clean the car",
        ],
    )
    ids = _ids(home)
    replies = _answer(
        home,
        ["delete the gym reminder", "stop reminding me to clean", "cancel the yoga reminder"],
        sent="2026-03-28T12:05:00+00:00",
    )
    assert replies[0] == f"Deleted {ids['go to the gym']}."
    assert replies[1].startswith('Which one should I cancel? Say "cancel" and its id:')
    assert ids["clean the kitchen"] in replies[1] and ids["clean the car"] in replies[1]
    assert replies[2].startswith("You have no such reminder, so I cancelled nothing.")
    assert set(_jobs(home)) == {"clean the kitchen", "clean the car"}

    (reply,) = _answer(home, ["stop reminding me to clean the car"], sent="2026-03-28T12:10:00+00:00")
    assert reply == f"Deleted {ids['clean the car']}." and set(_jobs(home)) == {"clean the kitchen"}


@pytest.mark.parametrize(
    ("text", "now", "task", "at"),
    [
        ("remind me on the 3rd of April at 5 to call Anna", SAT_NOON, "call Anna", "2026-04-03T17:00+01:00"),
        ("remind me on April the 3rd at 8pm to call Anna", SAT_NOON, "call Anna", "2026-04-03T20:00+01:00"),
        (
            "set a reminder for 24 December at noon to wrap gifts",
            SAT_NOON,
            "wrap gifts",
            "2026-12-24T12:00+00:00",
        ),
        ("Reminder: dentist on March 3", SAT_NOON, "dentist", "2027-03-03T09:00+00:00"),
        (
            "remind me on Friday, April 3 at 9 to book the car",
            SAT_NOON,
            "book the car",
            "2026-04-03T09:00+01:00",
        ),
        ("remind me on March 3 2027 to renew", SAT_NOON, "renew", "2027-03-03T09:00+00:00"),
        # The next 31st is this month's; in April it is May's. A 29 February is the next leap year's.
        ("remind me on the 31st to pay", SAT_NOON, "pay", "2026-03-31T09:00+01:00"),
        ("remind me on the 31st to pay", SAT_NOON.replace(day=30, month=4), "pay", "2026-05-31T09:00+01:00"),
        ("remind me on Feb 29 to celebrate", SAT_NOON, "celebrate", "2028-02-29T09:00+00:00"),
        # Today's date: a bare hour is the next of the two.
        ("remind me on March 28 at 5 to call Anna", SAT_NOON, "call Anna", "2026-03-28T17:00+00:00"),
        ("remind me in 2 and a half hours to stretch", SAT_NOON, "stretch", "2026-03-28T14:30+00:00"),
        ("remind me in half an hour to stretch", SAT_NOON, "stretch", "2026-03-28T12:30+00:00"),
        ("remind me in 90 seconds to stretch", SAT_NOON, "stretch", "2026-03-28T12:01+00:00"),  # 12:01:30
        # Whole days on the wall clock (across the change), the hours elapsed after them.
        ("remind me in 1 day and 2 hours to stretch", SAT_NOON, "stretch", "2026-03-29T14:00+01:00"),
    ],
)
def test_english_reads_dates_and_spans(text, now, task, at):
    wish = english.parse(text, now)
    assert wish is not None and wish.cron is None
    assert (wish.task, wish.at.isoformat(timespec="minutes")) == (task, at)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("remind me on the 32nd to pay", "the 32nd is not a date"),
        ("remind me tomorrow to book the May 3 flight", "tomorrow is not 3 May"),
        ("remind me on March 3, 2026 to renew", "March 3, 2026 has already passed"),
        ("remind me on March 28 at 9am to renew", "09:00 on 28 March has already passed"),
        # A repeating reminder goes on from now: never until a date, nor set once instead.
        ("remind me every day until Dec 24 to water the tree", "not until or from a date$"),
        ("remind me on the 1st of every month until Dec 24 to pay", "not until or from a date$"),
        ("remind me every year on March 3, 2027 to renew", "not until or from a date$"),
        ("remind me every 5th day to water", "not until or from a date$"),
        ("remind me on 3/4 at 10 to renew", '"on 3/4" could be either of two days'),
    ],
)
def test_english_refuses_a_date_it_cannot_keep(text, why):
    with pytest.raises(english.Unreadable, match=why):
        english.parse(text, SAT_NOON)


@pytest.mark.parametrize(
    ("text", "task", "cron"),
    [
        # Each had been set once, with the repetition in the reminder's text, or refused.
        ("remind me on the first of every month at 9 to pay rent", "pay rent", "0 9 1 * *"),
        ("remind me monthly on the 15th at 8am to pay rent", "pay rent", "0 8 15 * *"),
        ("remind me on the 5th of every month to pay rent", "pay rent", "0 9 5 * *"),
        ("remind me every month on the 5th to pay rent", "pay rent", "0 9 5 * *"),
        ("remind me on the first of each month to pay rent", "pay rent", "0 9 1 * *"),
        ("remind me the 1st of every month to pay rent", "pay rent", "0 9 1 * *"),
        ("set a reminder for the 1st of every month to pay rent", "pay rent", "0 9 1 * *"),
        ("Reminder: pay rent on the 1st of every month", "pay rent", "0 9 1 * *"),
        ("remind me on the 5th to pay rent monthly", "pay rent", "0 9 5 * *"),
        ("remind me every month on 15 at 8 to water", "water", "0 8 15 * *"),
        ("remind me every 5th to pay rent", "pay rent", "0 9 5 * *"),
        ("remind me every second of the month to x", "x", "0 9 2 * *"),
        ("remind me on the tenth of every month to x", "x", "0 9 10 * *"),
        ("remind me on the twenty-first of each month to x", "x", "0 9 21 * *"),
        (
            "remind me on the 1st and 15th of every month at 9 to pay the nanny",
            "pay the nanny",
            "0 9 1,15 * *",
        ),
        ("remind me on the last day of every month to file expenses", "file expenses", "0 9 L * *"),
        ("remind me every last day of the month at 12 at night to x", "x", "0 0 L * *"),
        # A bare hour as in every repeating reminder; a part of the day without a time.
        ("remind me on the 1st of every month at 3 to call gran", "call gran", "0 15 1 * *"),
        ("remind me on the 1st of every month in the evening to call gran", "call gran", "0 18 1 * *"),
        ("remind me on the 5th of every month at 9.30 to pay", "pay", "30 9 5 * *"),
        ("Every month on the 1st send me a budget summary", "send me a budget summary", "0 9 1 * *"),
        (
            "remind me on the 1st of every month to read every day's notes",
            "read every day's notes",
            "0 9 1 * *",
        ),
        ("remind me every year on March 3 at 10 to call the dentist", "call the dentist", "0 10 3 3 *"),
        ("remind me every March 3 to renew", "renew", "0 9 3 3 *"),
        ("remind me each year on the 3rd of March to renew", "renew", "0 9 3 3 *"),
        ("remind me yearly on 24 December to wrap gifts", "wrap gifts", "0 9 24 12 *"),
        ("remind me annually on March 3 to renew", "renew", "0 9 3 3 *"),
        ("Every 3 March remind me to renew", "renew", "0 9 3 3 *"),
    ],
)
def test_english_repeats_on_a_day_of_every_month_or_year(text, task, cron):
    wish = english.parse(text, SAT_NOON)
    assert wish is not None and (wish.task, wish.cron, wish.at) == (task, cron, None)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        # Never set once, for today or tomorrow, with "every month" in its text.
        ("remind me every month at 9 to pay rent", "^every month needs a day of the month, as in"),
        ("remind me monthly at 9am to pay rent", "^every month needs a day of the month"),
        ("remind me to pay rent monthly", "^every month needs a day of the month"),
        ("remind me every month to focus on the first goal", "^every month needs a day of the month"),
        ("remind me on the fifth Monday of every month to book", "^every month needs a day of the month"),
        (
            "remind me every year at 9 to renew insurance",
            '^every year needs a date, as in "every March 3 at 9"$',
        ),
        ("remind me every May to renew", "^every year needs a date"),
        # Cron would skip the months or years without that day.
        (
            "remind me on the 31st of every month to pay",
            '^not every month has a 31st; say "on the last day of',
        ),
        ("remind me on the thirtieth of every month to pay", "^not every month has a 30th"),
        ("remind me on the 29th of every month to pay", "^not every month has a 29th"),
        ("remind me on the 32nd of every month to pay", "^the 32nd is not a day of the month$"),
        ("remind me every Feb 29 to celebrate", '^Feb 29 comes only in leap years; say "every February 28"'),
        ("remind me every year on Feb 30 to celebrate", "^Feb 30 is not a date$"),
        ("remind me every 2 months on the 5th to pay", "^every 2 months can't be kept exactly"),
        ("remind me every other year on March 3 to renew", "^every other year can't be kept exactly"),
    ],
)
def test_english_refuses_a_day_of_every_month_or_year_it_cannot_keep(text, why):
    with pytest.raises(english.Unreadable, match=why):
        english.parse(text, SAT_NOON)


@pytest.mark.parametrize(
    "text",
    [
        "I pay rent every month at 9",
        "Every month on the 1st I pay rent",
        "my insurance renews every March 3",
        "Monthly on the 5th we pay the rent",
    ],
)
def test_a_statement_of_what_repeats_monthly_sets_no_reminder(text):
    assert english.parse(text, SAT_NOON) is None


@pytest.mark.parametrize(
    ("text", "task", "at"),
    [
        # "monthly" and "every month's" that say nothing of when: set once, as before.
        ("remind me to pay the monthly rent tomorrow at 9", "pay the monthly rent", "2026-03-29T09:00+01:00"),
        (
            "remind me to send the yearly report on March 3",
            "send the yearly report",
            "2027-03-03T09:00+00:00",
        ),
        (
            "remind me tomorrow to pay every month's bills",
            "pay every month's bills",
            "2026-03-29T09:00+01:00",
        ),
    ],
)
def test_a_monthly_word_that_names_no_repetition_sets_one_reminder(text, task, at):
    wish = english.parse(text, SAT_NOON)
    assert wish is not None and wish.cron is None
    assert (wish.task, wish.at.isoformat(timespec="minutes")) == (task, at)


@pytest.mark.timeout(600)
def test_a_repeating_reminder_back_on_time_says_the_firings_it_missed(tmp_path):
    """Down from 12:15 to 14:00: the 14:00 firing is on time, the three before it were missed, and
    the reply had been a plain "Reminder: drink water" (QA, helper-48)."""
    home = tmp_path / "home"
    _answer(home, ["remind me every 30 minutes to drink water"])
    cortex("--now", "2026-03-28T14:00:30+00:00", "run", home=home, env={"CORTEX_TIMEZONE": "Europe/London"})
    (fired,) = [r for r in _replies(home) if r.startswith("Reminder: drink water")]
    assert fired == "Reminder: drink water (I was not running for the 3 time(s) before this one)", fired
