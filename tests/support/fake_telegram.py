"""A fake Telegram Bot API on 127.0.0.1, over real HTTP, for the connector's tests.

It keeps updates until a getUpdates with a higher offset confirms them (as Telegram does), answers
getUpdates by long polling, records every sendMessage, and can answer a chat with 403 (the user
blocked the bot), the next sendMessage calls with 429 and a retry_after, every one with 502 (an
outage), deliver the next ones but answer late, or hold every sendMessage after the first few
unanswered (to kill a connector in the middle of a reply).

    with FakeTelegram("123:abc") as tg:
        tg.push_text(chat_id=42, user_id=42, text="hi")
        ... CORTEX_TELEGRAM_API_BASE=tg.url ...
        assert tg.sent[0]["text"] == "hello"
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

# The fields python-telegram-bot JSON-encodes for the methods the fake answers; the rest (a
# message's text above all) are strings as sent, whatever they start with.
_JSON_FIELDS = {"allowed_updates", "reply_parameters", "reply_markup", "entities", "link_preview_options"}
BOT = {"id": 1000, "is_bot": True, "first_name": "Cortex", "username": "cortex_test_bot"}


class FakeTelegram:
    def __init__(self, token: str):
        self.token = token
        self.updates: list[dict] = []  # not confirmed yet
        self.pushed: dict[int, dict] = {}  # every message pushed, by update id
        self.sent: list[dict] = []
        self.calls: list[str] = []
        self.blocked_chats: set[int] = set()
        self.rate_limits: list[int] = []  # retry_after of the next sendMessage calls
        self.send_outage = False  # every sendMessage answers 502 and delivers nothing
        self.late_answers: list[float] = []  # the next sendMessage calls deliver, then answer this late
        self.hold_sends_after: int | None = None  # once this many are sent, hold the next unanswered
        self.held = 0  # sendMessage calls being held; they are never delivered
        self._release = threading.Event()
        self._next_update = 1
        self._next_message = 500
        self._changed = threading.Condition()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FakeTelegram:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def push_text(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        thread: int | None = None,
        forwarded_from: str | None = None,
    ) -> int:
        """A user writes to the bot (or forwards what `forwarded_from` wrote); returns the update id."""
        with self._changed:
            update_id, self._next_update = self._next_update, self._next_update + 1
            message_id, self._next_message = self._next_message, self._next_message + 1
            message = {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
                "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
                "text": text,
            }
            if thread is not None:
                message |= {"message_thread_id": thread, "is_topic_message": True}
            if forwarded_from is not None:
                author = {"id": 5550, "is_bot": False, "first_name": forwarded_from}
                message["forward_origin"] = {"type": "user", "date": message["date"], "sender_user": author}
            self.updates.append({"update_id": update_id, "message": message})
            self.pushed[update_id] = message
            self._changed.notify_all()
        return update_id

    def sent_texts(self) -> list[str]:
        with self._changed:
            return [m["text"] for m in self.sent]

    def release_held(self) -> None:
        """Stop holding: held calls fail with 502 (never delivered) and the next ones go through."""
        with self._changed:
            self.hold_sends_after = None
        self._release.set()

    def unconfirmed(self) -> int:
        with self._changed:
            return len(self.updates)

    # -- the Bot API ---------------------------------------------------------------------------

    def call(self, method: str, params: dict) -> tuple[int, dict]:
        self.calls.append(method)
        if method == "getMe":
            return 200, {"ok": True, "result": BOT}
        if method == "getUpdates":
            return 200, {"ok": True, "result": self._get_updates(params)}
        if method == "sendMessage":
            return self._send(params)
        return 404, {"ok": False, "error_code": 404, "description": f"Not Found: method {method}"}

    def _get_updates(self, params: dict) -> list[dict]:
        offset = int(params.get("offset") or 0)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        with self._changed:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
            while not self.updates and time.monotonic() < deadline:
                self._changed.wait(deadline - time.monotonic())
            return list(self.updates[: int(params.get("limit") or 100)])

    def _send(self, params: dict) -> tuple[int, dict]:
        with self._changed:
            hold = self.hold_sends_after is not None and len(self.sent) >= self.hold_sends_after
            self.held += hold
        if hold:
            self._release.wait()
        if hold or self.send_outage:
            return 502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}
        chat_id = int(params["chat_id"])
        if len(params["text"].encode("utf-16-le")) // 2 > 4096:
            return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message is too long"}
        with self._changed:
            if self.rate_limits:
                wait = self.rate_limits.pop(0)
                return 429, {
                    "ok": False,
                    "error_code": 429,
                    "description": f"Too Many Requests: retry after {wait}",
                    "parameters": {"retry_after": wait},
                }
            if chat_id in self.blocked_chats:
                return 403, {
                    "ok": False,
                    "error_code": 403,
                    "description": "Forbidden: bot was blocked by the user",
                }
            message_id, self._next_message = self._next_message, self._next_message + 1
            self.sent.append({**params, "chat_id": chat_id, "at": time.monotonic()})
            late = self.late_answers.pop(0) if self.late_answers else 0.0
        time.sleep(late)
        result = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": BOT,
            "text": params["text"],
        }
        return 200, {"ok": True, "result": result}


def _decoded(raw: bytes, content_type: str) -> dict:
    """python-telegram-bot posts form fields, JSON-encoding the non-string ones."""
    if content_type.startswith("application/json"):
        return json.loads(raw or b"{}")
    fields = {k: v[-1] for k, v in parse_qs(raw.decode()).items()}
    return {k: json.loads(v) if k in _JSON_FIELDS else v for k, v in fields.items()}


def _handler(fake: FakeTelegram) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            path = urlparse(self.path).path
            prefix = f"/bot{fake.token}/"
            if not path.startswith(prefix):
                return self._answer(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, body = fake.call(path[len(prefix) :], _decoded(raw, self.headers.get("Content-Type", "")))
            self._answer(status, body)

        do_GET = do_POST

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a long poll given up
                self.wfile.write(data)

    return Handler
