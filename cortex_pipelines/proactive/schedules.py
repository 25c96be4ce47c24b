"""User-created schedules (seed 001): persistent jobs whose firings become synthetic inbound
messages on the `cron` channel, through the same validation and bus as any other message.

A firing and the advance of its job's `next_fire_at` commit in one transaction, and the bus row's
external id is `<job>@<fire time>`, so a crash or restart neither skips nor doubles a firing. A
firing found more than `schedule_grace_s` after its due time (Cortex was down) is delivered once,
marked late; several missed firings of one job collapse into that one late delivery. A firing
whose job's channel has since been removed from the configuration or turned off is answered on a
channel the owner can still read, and says so (`reply_target`).
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import cron_descriptor
from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cortex_pipelines.config import (
    ADMIN_CHANNEL,
    CHANNEL_PATTERN,
    ROUTER_CHANNEL,
    SCHEDULE_CHANNEL,
    SCHEDULE_ID_PREFIX,
    SCHEDULE_SENDER,
    Settings,
)
from cortex_pipelines.ingest.envelope import validate
from cortex_pipelines.storage import schedules as schedule_store
from cortex_pipelines.storage.bus import enqueue_rows, sent_at

SENDER = SCHEDULE_SENDER
CHANNEL = SCHEDULE_CHANNEL
DESCRIPTION_MAX = 200
ACTION_MAX = 2000
# Never where a reminder falls back to: the firings' own channel, delegated results', and the
# owner's terminal (`cortex chat` shows the answers to what is typed in it, nothing else).
_NO_FALLBACK = frozenset({SCHEDULE_CHANNEL, ROUTER_CHANNEL, ADMIN_CHANNEL})

log = logging.getLogger(__name__)


class ScheduleError(ValueError):
    """A schedule request that cannot be kept; the message says why in one line."""


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown timezone {name!r} (use an IANA name like Europe/Berlin)") from None


class ScheduleRequest(BaseModel):
    """What the LLM (or the CLI) asks for. Exactly one of `cron` and `at`."""

    model_config = ConfigDict(extra="ignore")
    description: str = Field(min_length=1, max_length=DESCRIPTION_MAX)
    action: str = Field(
        min_length=1, max_length=ACTION_MAX, description="the prompt the agent gets when it fires"
    )
    cron: str | None = Field(None, description="5-field cron expression, read in `timezone`")
    at: str | None = Field(None, description="one-shot ISO 8601 time; without an offset it is in `timezone`")
    timezone: str | None = Field(None, description="IANA name; default: the instance timezone")
    target_channel: str | None = Field(None, pattern=CHANNEL_PATTERN, description="default: this channel")
    topic: str | None = Field(None, max_length=100)

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is not None and (len(value.split()) != 5 or not croniter.is_valid(value)):
            raise ValueError(f"{value!r} is not a 5-field cron expression")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ScheduleRequest:
        if (self.cron is None) == (self.at is None):
            raise ValueError("give exactly one of 'cron' (recurring) and 'at' (one-shot)")
        return self


def _naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None)


def _aware(naive_utc: datetime) -> datetime:
    return naive_utc.replace(tzinfo=UTC)


def next_cron_fire(cron: str, tz: str, after: datetime) -> datetime:
    """The first firing strictly after `after` (aware), computed on the job's wall clock. A time the
    autumn change repeats fires once, at its first occurrence (a daily 01:30 had fired at 01:30 BST
    and again at 01:30 GMT); a job whose minute or hour field starts with "*" runs by the elapsed
    clock through the repeated hour, as cron does."""
    wall = zone(tz)
    minute, hour = cron.split()[:2]
    by_the_clock = minute.startswith("*") or hour.startswith("*")
    following = croniter(cron, after.astimezone(wall)).get_next(datetime)
    while not by_the_clock and _repeated(following.astimezone(wall)):
        following = croniter(cron, following).get_next(datetime)
    return following.astimezone(UTC)


def _repeated(local: datetime) -> bool:
    """The second occurrence of a wall time the autumn change repeats."""
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def _parse_at(raw: str, tz: str) -> datetime:
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ScheduleError(f"'at' is not an ISO 8601 time: {raw[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone(tz))
    return moment.astimezone(UTC)


def create(
    con,
    request: ScheduleRequest,
    settings: Settings,
    now: datetime,
    origin_channel: str,
    created_by: int | None = None,
) -> dict:
    """Store a job and compute its first firing; refuse what could never fire or never arrive. A
    one-shot time after the asking message (`created_by`) was sent is kept even when it has passed
    since ("in 10 minutes", read an hour late): it is due at once, like a firing missed while down."""
    tz = request.timezone or settings.timezone
    zone(tz)
    target = request.target_channel or origin_channel
    if target not in settings.known_channels() or target == CHANNEL:
        raise ScheduleError(f"cannot deliver to channel {target!r}")
    if request.cron is not None:
        first = next_cron_fire(request.cron, tz, now)
        run_at = None
    else:
        first = _parse_at(request.at or "", tz)
        sent = sent_at(con, created_by) if created_by is not None else None
        asked = min(now, _aware(sent)) if sent else now
        if first < asked - timedelta(seconds=settings.schedule_grace_s):
            raise ScheduleError(f"{request.at} is in the past")
        run_at = _naive_utc(first)
    job_id = SCHEDULE_ID_PREFIX + uuid.uuid4().hex[:8]
    schedule_store.insert_schedule(
        con,
        job_id,
        description=request.description,
        cron=request.cron,
        run_at=run_at,
        timezone=tz,
        action=request.action,
        target_channel=target,
        topic=request.topic,
        created_at=_naive_utc(now),
        created_by=created_by,
        next_fire_at=_naive_utc(first),
    )
    return schedule_store.schedule_by_id(con, job_id)


def summary(con) -> dict:
    """The `schedules` section of `cortex status --json`."""
    jobs = schedule_store.active_schedules(con)
    upcoming = next((describe(j)["next_fire"] for j in jobs if j["next_fire_at"]), None)
    return {"active": len(jobs), "next_fire": upcoming}


_UNDESCRIBED = (
    cron_descriptor.FormatError,
    cron_descriptor.MissingFieldError,
    cron_descriptor.WrongArgumentError,
)


def in_words(cron: str) -> str:
    """A cron as people read it: "at 09:00, only on Monday", "every day at 20:00", "every 30
    minutes" (confirmations and `cortex schedules` showed "cron 0 9 * * 1")."""
    minute, hour = cron.split()[:2]
    if _uneven_step(minute, 60) or _uneven_step(hour, 24):  # "*/45" fires at :00 and :45
        return f"by cron {cron}"
    options = cron_descriptor.Options()
    options.use_24hour_time_format = True
    try:
        described = cron_descriptor.ExpressionDescriptor(cron, options)
        said = _steps_between_hours(cron) or described.get_description()
        if said.startswith("every ") and " from " in said:
            said += described.get_day_of_week_description()
    except _UNDESCRIBED:
        return f"by cron {cron}"
    said = said[:1].lower() + said[1:]
    return f"every day {said}" if said.startswith("at ") and "," not in said else said


def _steps_between_hours(cron: str) -> str | None:
    """ "every hour from 09:00 to 17:00" for a step kept within hours ("0 9-17 * * *", "*/30 9-16",
    "0 22-23,0-2"): cron-descriptor said "between 09:00 and 17:59", past the last firing, and read
    hours across midnight as one span."""
    minute, hour, day, month, _ = cron.split()
    if "-" not in hour or (day, month) != ("*", "*") or not re.fullmatch(r"\d+|\*/\d+", minute):
        return None
    minutes, hours = croniter.expand(cron)[0][:2]
    if "*" in minutes or "*" in hours:
        return None
    gaps = [(hours[(i + 1) % len(hours)] - h) % 24 for i, h in enumerate(hours)]
    widest = max(range(len(hours)), key=gaps.__getitem__)  # the day's span starts after it
    ordered = hours[widest + 1 :] + hours[: widest + 1]
    steps = {g for i, g in enumerate(gaps) if i != widest}
    if len(minutes) > 1:  # "*/30": every 30 minutes within each hour
        every, unit = minutes[1] - minutes[0], "minutes"
        if steps - {1}:
            return None
    elif len(steps) == 1 and len(hours) > 1:
        every, unit = steps.pop(), "hours"
    else:
        return None
    first, last = f"{ordered[0]:02d}:{minutes[0]:02d}", f"{ordered[-1]:02d}:{minutes[-1]:02d}"
    return f"every {unit[:-1] if every == 1 else f'{every} {unit}'} from {first} to {last}"


def _uneven_step(field: str, period: int) -> bool:
    """A step that does not divide its field's period restarts with it: cron-descriptor would call
    "*/90" in the minute field "every 90 minutes", which fires every hour."""
    step = field.partition("/")[2]
    return step.isdigit() and period % int(step) != 0


def when_listed(job: dict) -> str:
    """How a listing shows when a described job fires: in words, with its cron for the exact rule."""
    return f"{job['repeats']} ({job['when']})" if job["repeats"] else job["when"]


def describe(job: dict) -> dict:
    """A job as users and the model read it: times on the job's own wall clock."""
    tz = zone(job["timezone"])
    nxt = job["next_fire_at"]
    return {
        "id": job["id"],
        "description": job["description"],
        "when": f"cron {job['cron']}" if job["cron"] else "once",
        "repeats": in_words(job["cron"]) if job["cron"] else None,
        "timezone": job["timezone"],
        "next_fire": _aware(nxt).astimezone(tz).isoformat(timespec="minutes") if nxt else None,
        "target_channel": job["target_channel"],
        "action": job["action"],
        "fired": job["fired_count"],
        "state": job["state"],
    }


@dataclass(frozen=True)
class Firing:
    job_id: str
    due_at: datetime  # aware UTC
    late: bool
    missed: int
    bus_id: int | None  # None when this firing was already on the bus
    rerouted: str | None = None  # why its reply goes elsewhere than its job's channel, one line


def channel_gone(settings: Settings, channel: str) -> str | None:
    """Why a reply on `channel` would reach nobody, or None when it can be delivered (a `shadow`
    channel is kept: recording without sending is what its owner asked of it)."""
    if channel not in settings.known_channels():
        return "no longer configured"
    if settings.mode_for(channel) == "off":
        return "turned off"
    return None


def reply_target(con, settings: Settings, channel: str) -> tuple[str, str | None]:
    """Where the reply to a firing of a job made for `channel` goes, and why not there (None when
    it does). A channel since removed from the configuration (CORTEX_CHANNELS, CORTEX_CHANNEL_MODES)
    or turned off would drop the reminder unsaid: it goes instead to the live channel where the
    owner wrote last (so it has a chat to go to), else the first live one CORTEX_OWNERS names, else
    webchat. With no live channel left it stays on `channel`, recorded and never sent."""
    why = channel_gone(settings, channel)
    if why is None:
        return channel, None
    live = sorted(
        c for c in settings.known_channels() - _NO_FALLBACK if c != channel and settings.mode_for(c) == "live"
    )
    latest = schedule_store.latest_owner_channel(con, {c: sorted(settings.owner_ids(c)) for c in live})
    for candidate in (latest, *settings.owners, "webchat"):
        if candidate in live:
            return candidate, why
    return channel, why


def _firing_text(
    job: dict, due_local: datetime, late: bool, missed: int, max_bytes: int, rerouted: str | None = None
) -> str:
    """What the brain is told when a job is due, within the bus's size limit: the action is cut
    (with "…") when a lower CORTEX_MAX_TEXT_BYTES than the one it was made under leaves it too
    long; refused, it stopped every due job and crashed every run."""
    when = due_local.strftime("%a %d %b %H:%M %Z")
    note = ""
    if late:
        note = f" It was due at {when} and is delivered late because Cortex was not running"
        note += f" ({missed} earlier firing(s) were folded into this one)." if missed else "."
    elif missed:  # this firing is on time, the ones before it were missed: say so all the same
        note = f" Cortex was not running for its {missed} earlier firing(s), folded into this one."
    if rerouted:
        note += f" {rerouted[0].upper()}{rerouted[1:]}: say so in the reply."
    text = f"Scheduled job {job['id']} ({job['description']}) is due, {when}.{note}\nAction: {job['action']}"
    if len(text.encode()) <= max_bytes:
        return text
    return text.encode()[: max_bytes - len("…".encode())].decode(errors="ignore") + "…"


def fire_due(con, settings: Settings, now: datetime) -> list[Firing]:
    """Turn every due firing into a bus message and advance its job, in the caller's transaction."""
    grace = timedelta(seconds=settings.schedule_grace_s)
    jobs = schedule_store.due_schedules(con, _naive_utc(now))
    firings = []
    for job in jobs:
        due = _aware(job["next_fire_at"])
        missed = 0
        following = None
        if job["cron"]:
            following = next_cron_fire(job["cron"], job["timezone"], due)
            while following <= now:  # down across several firings: deliver the latest, once
                missed, due = missed + 1, following
                following = next_cron_fire(job["cron"], job["timezone"], due)
        late = now - due > grace
        due_local = due.astimezone(zone(job["timezone"]))
        target, gone = reply_target(con, settings, job["target_channel"])
        rerouted = None
        if gone and target != job["target_channel"]:
            rerouted = f"its channel {job['target_channel']} is {gone}, so the reply goes to {target}"
            log.warning("reminder %s (%s): %s instead", job["id"], job["description"], rerouted)
        elif gone:
            log.warning(
                "reminder %s (%s): its channel %s is %s and no channel is live to take it instead: "
                "the reply is recorded, not sent",
                job["id"],
                job["description"],
                job["target_channel"],
                gone,
            )
        elif settings.mode_for(target) == "shadow":  # as the channel is set: watched, never sent
            log.warning(
                "reminder %s (%s): its channel %s is in shadow mode: the reply is recorded, not sent",
                job["id"],
                job["description"],
                target,
            )
        envelope = {
            "channel": CHANNEL,
            "external_id": f"{job['id']}@{due.strftime('%Y-%m-%dT%H:%MZ')}",
            "sender": SENDER,
            "text": _firing_text(job, due_local, late, missed, settings.max_text_bytes, rerouted),
            "priority": "normal",
            "topic": job["topic"],
            "timestamp": due.isoformat(),
            "metadata": {
                "schedule_id": job["id"],
                "description": job["description"],
                "action": job["action"],
                "target_channel": target,
                "asked_in": job["created_by"],  # the reply goes to that conversation
                "due_at": due_local.isoformat(),
                "late": late,
                "missed": missed,
            },
        }
        if rerouted:
            envelope["metadata"] |= {"scheduled_channel": job["target_channel"], "rerouted": rerouted}
        row = validate(envelope, settings, now, folder_channel=None, scheduler=True)
        inserted = enqueue_rows(con, [row], source=f"schedule:{job['id']}").inserted
        schedule_store.record_firing(
            con, job["id"], _naive_utc(now), late, _naive_utc(following) if following else None
        )
        firings.append(Firing(job["id"], due, late, missed, inserted[0] if inserted else None, rerouted))
    return firings
