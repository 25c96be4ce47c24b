"""The inbound envelope: what a connector may hand us, checked strictly before it touches the bus."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cortex_pipelines.config import (
    ADMIN_CHANNEL,
    CHANNEL_PATTERN,
    SCHEDULE_CHANNEL,
    SCHEDULE_ID_PREFIX,
    SCHEDULE_SENDER,
    Settings,
    check_sender_id,
    is_firing,
)
from cortex_pipelines.storage.bus import CONTENT_ID_PREFIX, content_id_keys

Priority = Literal["urgent", "normal", "background"]
PRIORITY_RANK: dict[str, int] = {"urgent": 0, "normal": 1, "background": 2}

# C0/C1 controls other than tab, newline and carriage return; bidi embedding/override/isolate marks
# that can make text render differently from what is stored.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BIDI = re.compile(r"[\u202a-\u202e\u2066-\u2069]")
# Controls that end a line (vertical tab, form feed, next line, the file/group/record separators).
_LINE_BREAKS = re.compile(r"[\x0b\x0c\x1c-\x1e\x85]")
_EARLIEST = datetime(1990, 1, 1, tzinfo=UTC)
_FUTURE_SLACK = timedelta(days=1)
# Metadata is a connector's routing detail (chat, message, op ids), not a payload: 16 KiB is far
# above what any connector sends, and keeps a message's row small.
MAX_METADATA_BYTES = 16 * 1024
# Metadata keys that become a reply's recipient (storage/outbox.py): an id, never a structure.
_RECIPIENT_KEYS = ("chat_id", "message_id")


class EnvelopeError(ValueError):
    """The message is unusable; str() is the one-line reason written beside the rejected file."""


class Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    channel: str = Field(pattern=CHANNEL_PATTERN)
    text: str = Field(min_length=1)
    sender: str = Field(min_length=1, max_length=256)
    external_id: str | None = Field(default=None, min_length=1, max_length=256)
    timestamp: str | None = None
    priority: Priority = "normal"
    thread: str | None = Field(default=None, max_length=256)
    topic: str | None = Field(default=None, max_length=256)
    reply_to: str | None = Field(default=None, max_length=256)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("text", "sender", "external_id", "thread", "topic", "reply_to")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if _CONTROL.search(value):
            raise ValueError("contains control characters")
        if _BIDI.search(value):
            raise ValueError("contains bidi override characters")
        return value

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is blank")
        return value

    @field_validator("sender")
    @classmethod
    def _sender_id(cls, value: str) -> str:
        """Owners are told apart by sender id: one that hides a character would pass for the owner's."""
        return check_sender_id(value)


def neutralized(text: str) -> str:
    """Text a chat app sent, made what the envelope takes: its line-ending controls become line
    breaks, and other controls and bidi embedding, override and isolate marks go (Android and RTL
    clients add isolates around names and numbers). Without the marks the text reads as it is
    stored, which is all the refusal guards against; a sender id is never neutralized."""
    return _BIDI.sub("", _CONTROL.sub("", _LINE_BREAKS.sub("\n", text)))


def _fmt_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first.get("loc", ())) or "message"
    if first.get("type") == "extra_forbidden":
        return f"unknown field {field!r} (put extra data under 'metadata')"
    if first.get("type") == "missing":
        return f"missing field {field!r}"
    detail = first.get("msg", "invalid").removeprefix("Value error, ")
    return f"field {field!r}: {detail}"


def _metadata_json(metadata: dict[str, Any]) -> str:
    """The metadata as strict UTF-8 JSON: a lone surrogate or NaN would pass json.loads here and
    then fail the bus insert, taking every other file of the pass down with it."""
    for key in _RECIPIENT_KEYS:
        value = metadata.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, str | int)):
            raise EnvelopeError(f"field 'metadata.{key}': must be a string or an integer")
    try:
        encoded = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
        size = len(encoded.encode())
    except UnicodeEncodeError:
        raise EnvelopeError("field 'metadata': not valid Unicode (a lone surrogate)") from None
    except ValueError:
        raise EnvelopeError("field 'metadata': NaN and Infinity are not JSON") from None
    if size > MAX_METADATA_BYTES:
        raise EnvelopeError(f"field 'metadata' is {size} bytes, over the {MAX_METADATA_BYTES}-byte limit")
    return encoded


def parse_timestamp(raw: str | None, now: datetime) -> datetime:
    """ISO 8601 to naive UTC; naive inputs are taken as UTC. Far past/future is refused."""
    if raw is None:
        return now.astimezone(UTC).replace(tzinfo=None)
    try:
        ts = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise EnvelopeError(f"field 'timestamp': not ISO 8601: {raw[:40]!r}") from None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    if ts < _EARLIEST or ts > now + _FUTURE_SLACK:
        raise EnvelopeError(f"field 'timestamp': {raw[:40]!r} is implausibly far in the past or future")
    return ts.astimezone(UTC).replace(tzinfo=None)


def content_id(env: Envelope, old: bool = False) -> str:
    """Stable id for messages that arrive without one, so a re-sent file is not a new message: its
    channel, sender, words, timestamp and thread, and what says where it belongs or what it answers
    (`bus.content_id_keys`: chat, message, op, reply_to), so a second chat's "yes" or a second op's
    "No results found." is a message of its own. With none of those the id is made as before they
    counted, so most ids never changed; `old` makes it that way whatever they are."""
    basis: list = [env.channel, env.sender, env.text, env.timestamp, env.thread or env.topic]
    if not old and (keys := content_id_keys(env.reply_to, env.metadata)):
        basis.append(keys)
    encoded = json.dumps(basis, ensure_ascii=False)
    return CONTENT_ID_PREFIX + hashlib.sha256(encoded.encode()).hexdigest()[:32]


def validate(
    raw: object,
    settings: Settings,
    now: datetime,
    folder_channel: str | None,
    terminal: bool = False,
    scheduler: bool = False,
) -> dict:
    """Check one decoded JSON value; return the bus row it becomes, or raise EnvelopeError. Only
    the owner's terminal (`cortex chat`, `terminal`) writes on the admin channel: it is the owner
    whoever the sender, with every tool, so an inbox file or a connector may not. Likewise only the
    `scheduler` writes a schedule's firing, which speaks for the owner who made the schedule."""
    if not isinstance(raw, dict):
        raise EnvelopeError(f"expected a JSON object, got {type(raw).__name__}")
    try:
        env = Envelope.model_validate(raw)
    except ValidationError as exc:
        raise EnvelopeError(_fmt_error(exc)) from None
    if folder_channel is not None and env.channel != folder_channel:
        raise EnvelopeError(f"channel {env.channel!r} does not match its folder {folder_channel!r}")
    if env.channel == ADMIN_CHANNEL and not terminal:
        raise EnvelopeError(
            f"channel {ADMIN_CHANNEL!r} is the owner's terminal: only `cortex chat` writes to it"
        )
    if is_firing(env.channel, env.sender) and not scheduler:
        raise EnvelopeError(
            f"sender {SCHEDULE_SENDER!r} on channel {SCHEDULE_CHANNEL!r} is a schedule's firing: "
            "only Cortex's scheduler writes it"
        )
    if (
        env.channel == SCHEDULE_CHANNEL
        and (env.external_id or "").startswith(SCHEDULE_ID_PREFIX)
        and not scheduler
    ):
        # Taken first, it made the real firing a duplicate, dropped unsaid.
        raise EnvelopeError(
            f"external id {env.external_id!r} on channel {SCHEDULE_CHANNEL!r} is a schedule firing's: "
            "only Cortex's scheduler writes it"
        )
    if env.channel not in settings.known_channels():
        raise EnvelopeError(
            f"unknown channel {env.channel!r}{settings.channel_hint(env.channel)}; add it to CORTEX_CHANNELS "
            "or CORTEX_CHANNEL_MODES"
        )
    size = len(env.text.encode())
    if size > settings.max_text_bytes:
        raise EnvelopeError(f"text is {size} bytes, over the {settings.max_text_bytes}-byte limit")
    metadata = _metadata_json(env.metadata)
    if unicodedata.is_normalized("NFC", env.text) is False:
        env = env.model_copy(update={"text": unicodedata.normalize("NFC", env.text)})
    external_id = env.external_id or content_id(env)
    # A home may hold this message under the id it had before its chat, op or reply counted.
    old_id = content_id(env, old=True) if not env.external_id else None
    return {
        "channel": env.channel,
        "external_id": external_id,
        "old_content_id": old_id if old_id != external_id else None,
        "sender": env.sender,
        "text": env.text,
        "priority": env.priority,
        "priority_rank": PRIORITY_RANK[env.priority],
        "thread": env.thread or env.topic,
        "reply_to": env.reply_to,
        "metadata": metadata,
        "sent_at": parse_timestamp(env.timestamp, now),
    }
