"""`cortex connect telegram`: a Telegram bot in front of the gateway, on python-telegram-bot.

Inbound: long polling `getUpdates` → POST /ingest, the update id as the external id, so an update
seen twice goes in once. Telegram keeps an update until a later getUpdates confirms it (offset), and
the connector confirms a batch only after it is ingested: a restart loses nothing and doubles
nothing. Only senders in CORTEX_SENDER_ALLOWLIST["telegram"] go in; a forum topic is the thread.
The text's invisible controls and bidi marks, which chat apps insert, are neutralized so the gateway
takes it; an update the gateway still refuses is kept in inbox/.rejected/telegram/ with its reason
(`cortex status` counts it), never dropped unsaid.

Outbound: POST /outbox/poll → sendMessage → POST /outbox/ack, one reply at a time, acknowledged as
soon as it is sent. Each part Telegram accepted is noted on disk first (storage/sent_parts.py), so a
reply that comes back after a crash resumes after its sent parts instead of repeating them.
Text goes as plain text (a model's output is not valid MarkdownV2 or HTML) in parts of at most
4,096 characters; a 429 is waited out for its retry_after; a chat that blocked
the bot, or a chat or topic that is gone, dead-letters the reply. While Telegram cannot be reached
(a network error, a 5xx), the leased replies are given back uncounted (POST /outbox/release) and
the connector tries again after a pause that doubles up to 30 s: an outage uses up no attempts.
A reply that keeps failing for FAILING_ALONE_AFTER_S while getUpdates answers is at fault itself:
it is left to its lease, which counts.
A part whose request reached Telegram but whose answer did not come within
CORTEX_TELEGRAM_SEND_TIMEOUT was most likely delivered: it is noted as sent with a warning, since
sending it again would most likely double it.

SIGTERM or Ctrl-C drains: the reply being sent is finished and acknowledged, the other replies
leased with it are given back uncounted (POST /outbox/release), then it exits. A stop that comes
while a 429 is waited out ends the wait and gives that reply back too.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from datetime import timedelta

import httpx
from telegram import (
    Bot,
    MessageOrigin,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
    ReplyParameters,
    Update,
)
from telegram.error import (
    BadRequest,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from cortex_pipelines.config import Settings
from cortex_pipelines.connectors.gateway_client import Erased, GatewayClient, GatewayRefused, Rejected
from cortex_pipelines.ingest.envelope import neutralized
from cortex_pipelines.ingest.inbox import set_aside
from cortex_pipelines.processes import alive
from cortex_pipelines.storage import sent_parts
from cortex_pipelines.text import forwarded_header

CHANNEL = "telegram"
MAX_CHARS = 4096  # sendMessage's limit, in UTF-16 code units
LONG_POLL_S = 25
IDLE_POLL_S = 1.0
BATCH = 5  # replies leased at once: a drain finishes one and gives the rest back
MAX_PAUSE_S = 30.0
# A reply that fails for this long while getUpdates keeps answering is at fault itself, not an outage.
FAILING_ALONE_AFTER_S = 120.0


class Fatal(Exception):
    """Configuration that a restart cannot fix (a wrong token or key): exit 2."""


class Unavailable(Exception):
    """Telegram could not be reached at start: exit 1, and `cortex serve` tries again later."""


def setup_problem(settings: Settings) -> str | None:
    """Why the connector cannot start, in one line; None when it can."""
    if settings.telegram_token is None or not settings.telegram_token.get_secret_value().strip():
        return "CORTEX_TELEGRAM_TOKEN is not set (the token @BotFather gave your bot)"
    if not settings.sender_allowlist.get(CHANNEL):
        return (
            'CORTEX_SENDER_ALLOWLIST has no "telegram" entry: list the Telegram user ids that may talk '
            'to the bot, e.g. {"telegram": ["123456789"]}'
        )
    return None


def _units(char: str) -> int:
    return 2 if ord(char) > 0xFFFF else 1


def split_message(text: str, limit: int = MAX_CHARS) -> list[str]:
    """Parts of at most `limit` UTF-16 code units, cut at the last line break (else space) in the
    second half of a part, never inside a character."""
    parts: list[str] = []
    while text:
        size, end = 0, 0
        while end < len(text) and size + _units(text[end]) <= limit:
            size += _units(text[end])
            end += 1
        if end < len(text):
            window = text[:end]
            cut = window.rfind("\n")
            if cut <= end // 2:
                cut = window.rfind(" ")
            if cut > end // 2:
                end = cut + 1
        parts.append(text[:end])
        text = text[end:]
    return [p for p in parts if p.strip()] or parts[:1]


def envelope(update: Update) -> dict | None:
    """The inbound envelope of an update; None for what is not a text message from a person."""
    message = update.message
    if message is None or message.from_user is None or message.from_user.is_bot:
        return None
    text = message.text or message.caption
    if not text:
        return None
    metadata = {"chat_id": message.chat.id, "message_id": message.message_id, "chat_type": message.chat.type}
    if message.forward_origin is not None:
        # Someone else's words the owner passed on: said so where the text starts (text.forwarded),
        # or a friend's "I live in Paris" became the owner's own (QA, helper-54).
        origin = _origin_name(message.forward_origin)
        text = f"{forwarded_header(origin)}\n{text}"
        metadata["forwarded_from"] = origin
    return {
        "channel": CHANNEL,
        "external_id": str(update.update_id),
        "sender": str(message.from_user.id),
        "text": neutralized(text),
        "timestamp": message.date.isoformat(),
        "thread": str(message.message_thread_id) if message.is_topic_message else None,
        "metadata": metadata,
    }


def _origin_name(origin: MessageOrigin) -> str:
    """Who a forwarded message came from, as Telegram names them (a user, a hidden user, a chat or
    a channel)."""
    if isinstance(origin, MessageOriginUser):
        return origin.sender_user.full_name
    if isinstance(origin, MessageOriginHiddenUser):
        return origin.sender_user_name
    if isinstance(origin, MessageOriginChat):
        return origin.sender_chat.title or "a chat"
    if isinstance(origin, MessageOriginChannel):
        return origin.chat.title or "a channel"
    return "someone"


def _seconds(value: int | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _answer_was_late(exc: TelegramError) -> bool:
    """The request went out whole and only Telegram's answer timed out: it was most likely
    delivered. A connect or write timeout, a refused connection or a 5xx answer means it was not."""
    return isinstance(exc, TimedOut) and isinstance(exc.__cause__, httpx.ReadTimeout)


def _number(value: str | None) -> int | None:
    with contextlib.suppress(TypeError, ValueError):
        return int(value)
    return None


class TelegramConnector:
    def __init__(
        self, settings: Settings, gateway_url: str, say: Callable[[str], None], parent_pid: int | None = None
    ):
        assert settings.telegram_token is not None and settings.ingest_api_key is not None
        self.token = settings.telegram_token.get_secret_value()
        self.key = settings.ingest_api_key.get_secret_value()
        self.allowed = set(settings.sender_allowlist.get(CHANNEL, []))
        self.api_base = settings.telegram_api_base.rstrip("/")
        self.gateway_url = gateway_url
        self.parent_pid = parent_pid
        self.paths = settings.paths
        self.sent_parts_file = settings.paths.connectors / "telegram-sent.sqlite"
        self.send_timeout = settings.telegram_send_timeout
        # When Telegram last answered getUpdates, and since when each reply has failed to send: a
        # reply that keeps failing while Telegram answers is that reply's fault, not an outage.
        self.reachable_at = 0.0
        self.failing_since: dict[int, float] = {}
        self.say = say
        self.stopping = asyncio.Event()

    def _redacted(self, text: str) -> str:
        """Never the token or the key in a line (PTB puts a refused token in its error)."""
        return text.replace(self.token, "<token>").replace(self.key, "<key>")

    def _say(self, line: str) -> None:
        self.say(self._redacted(line))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        bot = Bot(self.token, base_url=f"{self.api_base}/bot")
        self.sent = sent_parts.connect(self.sent_parts_file)
        try:
            async with bot, GatewayClient(self.gateway_url, self.key) as gateway:
                self._say(f"telegram: connected as @{bot.username}, gateway {self.gateway_url}")
                tasks = [
                    asyncio.create_task(self._inbound(bot, gateway)),
                    asyncio.create_task(self._outbound(bot, gateway)),
                    asyncio.create_task(self._watch_parent()),
                ]
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                self.stopping.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                for task in done:
                    if task.exception() is not None:
                        raise task.exception()
        except InvalidToken:
            raise Fatal("Telegram refused CORTEX_TELEGRAM_TOKEN") from None
        except GatewayRefused as exc:
            raise Fatal(str(exc)) from None
        except TelegramError as exc:
            raise Unavailable(f"Telegram unreachable: {self._redacted(str(exc))}") from None
        finally:
            self.sent.close()
        self._say("telegram: stopped")

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def _watch_parent(self) -> None:
        """Started by `cortex serve`: stop when it is gone, so a killed gateway leaves no orphan polling
        Telegram (a second getUpdates consumer gets 409 Conflict)."""
        while self.parent_pid is not None and not self.stopping.is_set():
            if not alive(self.parent_pid):
                self._say("telegram: the gateway process is gone; stopping")
                self.stopping.set()
            await self._pause(2.0)

    async def _inbound(self, bot: Bot, gateway: GatewayClient) -> None:
        offset: int | None = None
        pause = 1.0
        while not self.stopping.is_set():
            fetch = asyncio.create_task(
                bot.get_updates(offset=offset, timeout=LONG_POLL_S, allowed_updates=["message"])
            )
            stop = asyncio.create_task(self.stopping.wait())
            await asyncio.wait({fetch, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not fetch.done():  # stopping: nothing fetched is lost, Telegram keeps it unconfirmed
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, TelegramError):
                    await fetch
                return
            try:
                updates = fetch.result()
            except InvalidToken:
                raise
            except TelegramError as exc:
                self._say(f"telegram: getUpdates failed ({exc}); retrying in {pause:.0f} s")
                await self._pause(pause)
                pause = min(pause * 2, MAX_PAUSE_S)
                continue
            pause = 1.0
            self.reachable_at = time.monotonic()
            for update in updates:
                if not await self._ingest(update, gateway):
                    return
                offset = update.update_id + 1  # the next getUpdates confirms it

    async def _ingest(self, update: Update, gateway: GatewayClient) -> bool:
        """Hand one update to the gateway, retrying while the gateway is unreachable. False when it
        gave up because the connector is stopping: the update stays unconfirmed for next time."""
        found = envelope(update)
        if found is None:
            return True
        if found["sender"] not in self.allowed:
            self._say(f"telegram: update {update.update_id} from {found['sender']} skipped: not allowed")
            return True
        body = {k: v for k, v in found.items() if v is not None}
        pause = 1.0
        while True:
            try:
                await gateway.ingest(body)
                return True
            except Erased:
                self._say(f"telegram: update {update.update_id} skipped: it was erased")
                return True
            except Rejected as exc:
                kept = set_aside(self.paths, CHANNEL, f"update-{update.update_id}.json", body, str(exc))
                self._say(
                    f"telegram: warning: update {update.update_id} refused by the gateway: {exc}; "
                    f"kept in {kept}"
                )
                return True
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                if self.stopping.is_set():
                    return False
                self._say(f"telegram: gateway unavailable ({type(exc).__name__}); retrying in {pause:.0f} s")
                await self._pause(pause)
                pause = min(pause * 2, MAX_PAUSE_S)

    async def _outbound(self, bot: Bot, gateway: GatewayClient) -> None:
        pause = 1.0
        while not self.stopping.is_set():
            try:
                replies = await gateway.poll(CHANNEL, BATCH)
                waiting = await self._deliver_all(bot, gateway, replies)
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                if self.stopping.is_set():  # the gateway went first: nothing is retried
                    self._say(f"telegram: gateway unavailable while stopping ({type(exc).__name__})")
                    return
                self._say(f"telegram: gateway unavailable ({type(exc).__name__}); retrying in {pause:.0f} s")
                await self._pause(pause)
                pause = min(pause * 2, MAX_PAUSE_S)
                continue
            if waiting:
                self._say(f"telegram: {waiting} reply(ies) wait for Telegram; trying again in {pause:.0f} s")
                await self._pause(pause)
                pause = min(pause * 2, MAX_PAUSE_S)
                continue
            pause = 1.0
            if not replies:
                await self._pause(IDLE_POLL_S)

    async def _deliver_all(self, bot: Bot, gateway: GatewayClient, replies: list[dict]) -> int:
        """Send leased replies in order. When Telegram cannot be reached, this reply and the rest are
        given back uncounted, so an outage of any length uses up no attempts; returns how many. A
        stop gives back those not sent yet, so a restart sends them at once, not after their lease."""
        for n, reply in enumerate(replies):
            if self.stopping.is_set() or not await self._deliver(bot, gateway, reply):
                unsent = [r["id"] for r in replies[n:]]
                if self.stopping.is_set():
                    await self._give_back_before_exit(gateway, unsent)
                    return 0
                await gateway.release(unsent)
                return len(unsent)
        return 0

    async def _give_back_before_exit(self, gateway: GatewayClient, ids: list[int]) -> None:
        """Release replies on a stop; a gateway already gone leaves them to their lease, as before."""
        try:
            await gateway.release(ids)
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            self._say(
                f"telegram: could not give back {len(ids)} unsent reply(ies) ({type(exc).__name__}); "
                "they wait out their lease"
            )

    async def _deliver(self, bot: Bot, gateway: GatewayClient, reply: dict) -> bool:
        """Send one reply in parts; acknowledge it, dead-letter it, or leave it to its lease. False
        when it is to be given back unsent: Telegram could not be reached, or a stop came while a 429
        was waited out (parts already sent stay noted)."""
        recipient = reply["recipient"]
        chat = recipient.get("chat_id")
        if not chat:
            await gateway.dead_letter([reply["id"]], "no Telegram chat to send to")
            return True
        chat_id = _number(chat) or chat
        thread = _number(recipient.get("thread"))
        answered = _number(recipient.get("message_id"))
        key = sent_parts.reply_key(reply)
        already = sent_parts.parts_sent(self.sent, key)
        for n, part in enumerate(split_message(reply["text"])):
            if n in already:  # sent before a crash lost the acknowledgement
                continue
            quote = (
                ReplyParameters(answered, allow_sending_without_reply=True) if answered and n == 0 else None
            )
            try:
                if not await self._send(bot, chat_id, part, thread, quote):
                    return False
            except (Forbidden, BadRequest) as exc:
                self._say(f"telegram: reply {reply['id']} dead-lettered: {exc}")
                await gateway.dead_letter([reply["id"]], f"{type(exc).__name__}: {exc}")
                return True
            except TelegramError as exc:
                if not _answer_was_late(exc):
                    self._say(f"telegram: reply {reply['id']} not sent ({exc})")
                    # Unreachable (network, 5xx): given back uncounted. Else its lease brings it back.
                    return not isinstance(exc, NetworkError) or self._fails_alone(reply["id"])
                self._say(
                    f"telegram: warning: reply {reply['id']} part {n + 1}: Telegram took the request but did "
                    f"not answer within {self.send_timeout:g} s; counted as sent, not sent again"
                )
            sent_parts.note_part_sent(self.sent, key, n)
        await gateway.ack([reply["id"]])
        self.failing_since.pop(reply["id"], None)
        return True

    def _fails_alone(self, reply_id: int) -> bool:
        """Whether a reply that Telegram could not take (a network error, a 5xx) keeps failing while
        Telegram answers getUpdates: then it is left to its lease, which counts, or it would come
        back first after every pause and hold up every reply behind it for ever (review,
        helper-58)."""
        since = self.failing_since.setdefault(reply_id, time.monotonic())
        alone = self.reachable_at > since + FAILING_ALONE_AFTER_S
        if alone:
            self._say(f"telegram: reply {reply_id} keeps failing while Telegram answers; its lease counts")
        return alone

    async def _send(self, bot: Bot, chat_id, text: str, thread: int | None, quote) -> bool:
        """Send one part, waiting out 429s; False when a stop came during such a wait (retry_after
        can be minutes, longer than `cortex serve` waits for a connector to stop)."""
        while True:
            try:
                await bot.send_message(
                    chat_id,
                    text,
                    message_thread_id=thread,
                    reply_parameters=quote,
                    parse_mode=None,
                    read_timeout=self.send_timeout,
                )
                return True
            except RetryAfter as exc:
                wait = _seconds(exc.retry_after)
                self._say(f"telegram: rate limited; waiting {wait:.0f} s as Telegram asks")
                await self._pause(wait)
                if self.stopping.is_set():
                    return False
