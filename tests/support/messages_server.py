"""A local fake of the Anthropic Messages API for tests.

Why: pipeline code talks to Claude through the official ``anthropic`` SDK.
Mocking the SDK would skip its retry, timeout and parsing logic, so instead we
point a real ``anthropic.Anthropic(base_url=server.url)`` at this stdlib HTTP
server and script what it answers.  Non-streaming only.

Usage::

    with MessagesServer() as srv:
        srv.script(text("hi"), tool_use("lookup", {"q": "x"}), error(429))
        client = anthropic.Anthropic(api_key="test", base_url=srv.url)
        ...
        assert srv.requests[0]["model"] == "claude-test"

Prompt caching is reported the way the API does: the prompt is read as blocks in the order the
API caches them (each tool definition, each system block, each message content block); a prefix
ending at a block with ``cache_control`` is written to the server's cache, and a later request of
the same model that starts with a written prefix reads it. ``usage`` then splits the prompt into
``cache_read_input_tokens`` (the longest written prefix the request starts with),
``cache_creation_input_tokens`` (from there to its last breakpoint) and ``input_tokens`` (the rest).
Simplified: tokens are JSON characters / 4; a prefix shorter than ``min_cache_tokens`` is not
cached (the API's minimum is 1024–4096 by model); entries never expire (the API's last 5 minutes
from their last use); a hit is looked for at every block boundary (the API looks back 20 blocks
from each breakpoint). More than four breakpoints is a 400, as with the API.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Delay",
    "ErrorReply",
    "MessageReply",
    "MessagesServer",
    "RawReply",
    "Reply",
    "Responder",
    "delay",
    "error",
    "message",
    "raw",
    "text",
    "tool_use",
]


# --------------------------------------------------------------------------
# Reply objects (what the server should answer with)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class MessageReply:
    """A successful (200) Messages API response with the given content blocks."""

    content: list[dict[str, Any]]
    stop_reason: str = "end_turn"


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error; ``body`` None means a generated Anthropic-style error JSON."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delay:
    """Sleep ``seconds`` before answering with ``then`` (None = fallback reply)."""

    seconds: float
    then: Reply | None = None


@dataclass(frozen=True)
class RawReply:
    """Exact bytes on the wire, for malformed-response tests."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


Reply = MessageReply | ErrorReply | Delay | RawReply | str
"""A plain ``str`` is shorthand for ``text(str)``."""

Responder = Callable[[dict[str, Any]], "Reply | None"]


def _new_id(prefix: str) -> str:
    # Real ids look like "msg_01" + 22 base62 chars; hex is close enough.
    return f"{prefix}_01{secrets.token_hex(11)}"


def message(content: Iterable[Mapping[str, Any]], stop_reason: str = "end_turn") -> MessageReply:
    """Assistant message with arbitrary content blocks (escape hatch)."""
    return MessageReply(content=[dict(b) for b in content], stop_reason=stop_reason)


def text(value: str, stop_reason: str = "end_turn") -> MessageReply:
    """Assistant message with a single text block."""
    return MessageReply(content=[{"type": "text", "text": value}], stop_reason=stop_reason)


def tool_use(
    name: str,
    input: Mapping[str, Any],  # shadows builtin on purpose: mirrors the API field
    id: str | None = None,
    text: str | None = None,
) -> MessageReply:
    """Assistant message: optional text block, then one tool_use block.

    The generated id is readable as ``reply.content[-1]["id"]`` so a test can
    build the matching tool_result.
    """
    blocks: list[dict[str, Any]] = []
    if text is not None:
        blocks.append({"type": "text", "text": text})
    blocks.append({"type": "tool_use", "id": id or _new_id("toolu"), "name": name, "input": dict(input)})
    return MessageReply(content=blocks, stop_reason="tool_use")


def error(status: int, body: Any = None, headers: Mapping[str, str] | None = None) -> ErrorReply:
    """HTTP error reply.

    ``body``: None -> standard error JSON for ``status``; ``str`` -> standard
    error JSON with that message; anything else is sent as JSON verbatim.
    """
    return ErrorReply(status=status, body=body, headers=dict(headers or {}))


def delay(seconds: float, then: Reply | None = None) -> Delay:
    """Answer with ``then`` after ``seconds`` (for client-timeout tests)."""
    return Delay(seconds=seconds, then=then)


def raw(
    status: int,
    body: bytes | str,
    content_type: str = "application/json",
    headers: Mapping[str, str] | None = None,
) -> RawReply:
    """Send exactly ``body`` with ``status`` and ``content_type``."""
    data = body.encode() if isinstance(body, str) else bytes(body)
    return RawReply(status=status, body=data, content_type=content_type, headers=dict(headers or {}))


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _error_body(status: int, msg: str | None = None) -> dict[str, Any]:
    etype = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = msg or f"scripted {etype} ({status})"
    return {"type": "error", "error": {"type": etype, "message": message}}


def _approx_tokens(obj: Any) -> int:
    return max(1, len(json.dumps(obj)) // 4)


MAX_BREAKPOINTS = 4


def _prompt_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The prompt in the order the API caches it: tools, system, messages, one entry a block."""
    blocks: list[dict[str, Any]] = [dict(t) for t in body.get("tools") or [] if isinstance(t, dict)]
    system = body.get("system")
    if isinstance(system, str) and system:
        blocks.append({"type": "text", "text": system})
    elif isinstance(system, list):
        blocks += [dict(b) for b in system if isinstance(b, dict)]
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, str):
            blocks.append({"role": msg.get("role"), "type": "text", "text": content})
        elif isinstance(content, list):
            blocks += [{"role": msg.get("role"), **b} for b in content if isinstance(b, dict)]
    return blocks


@dataclass
class _Cache:
    """Prefixes written by earlier requests, by a digest of the model and the prefix's blocks."""

    min_tokens: int
    written: set[str] = field(default_factory=set)

    def usage(self, body: dict[str, Any]) -> dict[str, int] | None:
        """input/cache tokens for `body`, writing its breakpoints; None if it has too many."""
        blocks = _prompt_blocks(body)
        breakpoints = [i for i, b in enumerate(blocks) if b.get("cache_control")]
        if len(breakpoints) > MAX_BREAKPOINTS:
            return None
        plain = [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]
        tokens = [_approx_tokens(b) for b in plain]
        ends = [sum(tokens[: i + 1]) for i in range(len(tokens))]
        digest, keys = hashlib.sha256(str(body.get("model")).encode()), []
        for block in plain:
            digest.update(json.dumps(block, sort_keys=True).encode())
            keys.append(digest.hexdigest())
        read = max((ends[i] for i in range(len(blocks)) if keys[i] in self.written), default=0)
        cacheable = [i for i in breakpoints if ends[i] >= self.min_tokens]
        self.written.update(keys[i] for i in cacheable)
        created = max(0, ends[cacheable[-1]] - read) if cacheable else 0
        return {
            "input_tokens": max(0, sum(tokens) - read - created),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }


# --------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------


class MessagesServer:
    """Threaded fake of ``POST /v1/messages`` (+ ``/v1/messages/count_tokens``).

    Replies come from the scripted FIFO first, then ``responder(body)``, and
    finally ``text("NO_REPLY")`` so an unscripted call is visible rather than
    hanging.  ``requests`` holds parsed bodies of POST /v1/messages in arrival
    order and ``request_headers`` the matching (lower-cased) headers.
    """

    def __init__(
        self, responder: Responder | None = None, host: str = "127.0.0.1", min_cache_tokens: int = 1024
    ) -> None:
        self.responder = responder
        self._cache = _Cache(min_cache_tokens)
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self.count_tokens_requests: list[dict[str, Any]] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._httpd = ThreadingHTTPServer((host, 0), _make_handler(self))
        self._httpd.daemon_threads = True

    # -- lifecycle -----------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def cortex_env(self) -> dict[str, str]:
        """The variables that point a `cortex` command's anthropic provider at this server."""
        return {
            "CORTEX_LLM_PROVIDER": "anthropic",
            "CORTEX_BASE_URL": self.url,
            "CORTEX_API_KEY": "test-key",
            "CORTEX_MODEL": "claude-test",
        }

    def start(self) -> MessagesServer:
        """Start serving in a daemon thread (idempotent)."""
        if self._closed:
            raise RuntimeError("MessagesServer is closed")
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},  # fast close() in teardown
                name="MessagesServer",
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; wakes any handler stuck in a ``delay`` (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def __enter__(self) -> MessagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- scripting -----------------------------------------------------------

    def script(self, *replies: Reply) -> MessagesServer:
        """Append replies to the FIFO consumed one per /v1/messages request."""
        with self._lock:
            self._queue.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        with self._lock:
            return len(self._queue)

    # -- internals used by the handler ---------------------------------------

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.request_headers.append(headers)

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self._fallback(body)

    def _fallback(self, body: dict[str, Any]) -> Reply:
        if self.responder is not None:
            reply = self.responder(body)
            if reply is not None:
                return reply
        return text("NO_REPLY")


def _make_handler(server: MessagesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no idle keep-alive threads.
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: Any) -> None:
            """Silence per-request stderr logging."""

        def do_POST(self) -> None:
            # The client may have given up (e.g. SDK timeout); nothing to report.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._handle_post()

        def do_GET(self) -> None:
            self._send_json(404, _error_body(404, f"no route for GET {self.path}"))

        def _handle_post(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            length = int(self.headers.get("content-length") or 0)
            data = self.rfile.read(length) if length else b""
            try:
                body = json.loads(data or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("body must be a JSON object")
            except ValueError as exc:
                self._send_json(400, _error_body(400, f"invalid JSON body: {exc}"))
                return

            if path == "/v1/messages/count_tokens":
                with server._lock:
                    server.count_tokens_requests.append(body)
                self._send_json(200, {"input_tokens": _approx_tokens(body)})
                return
            if path != "/v1/messages":
                self._send_json(404, _error_body(404, f"no route for POST {self.path}"))
                return

            server._record(body, {k.lower(): v for k, v in self.headers.items()})
            if body.get("stream"):
                # Recorded, but does not consume a scripted reply.
                self._send_json(400, _error_body(400, "streaming is not supported by MessagesServer"))
                return
            self._answer(server._next_reply(body), body)

        def _answer(self, reply: Reply, body: dict[str, Any]) -> None:
            while isinstance(reply, Delay):
                if server._closing.wait(reply.seconds):
                    return  # shutting down; drop the connection
                reply = reply.then if reply.then is not None else server._fallback(body)
            if isinstance(reply, str):
                reply = text(reply)

            if isinstance(reply, MessageReply):
                with server._lock:
                    usage = server._cache.usage(body)
                if usage is None:
                    message = f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided."
                    self._send_json(400, _error_body(400, message))
                    return
                self._send_json(
                    200,
                    {
                        "id": _new_id("msg"),
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model", "unknown"),
                        "content": reply.content,
                        "stop_reason": reply.stop_reason,
                        "stop_sequence": None,
                        "usage": {**usage, "output_tokens": _approx_tokens(reply.content)},
                    },
                )
            elif isinstance(reply, ErrorReply):
                payload = reply.body
                if payload is None or isinstance(payload, str):
                    payload = _error_body(reply.status, payload)
                self._send_json(reply.status, payload, reply.headers)
            elif isinstance(reply, RawReply):
                self._send(reply.status, reply.body, reply.content_type, reply.headers)
            else:
                self._send_json(500, _error_body(500, f"MessagesServer: unknown reply {reply!r}"))

        def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
            self._send(status, json.dumps(payload).encode(), "application/json", headers)

        def _send(
            self,
            status: int,
            data: bytes,
            content_type: str,
            headers: Mapping[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", _new_id("req"))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextlib.contextmanager
def model_held_after(answered: int, reply: str = "Noted."):
    """A server whose model answers the first `answered` requests at once and keeps every later one
    waiting until the yielded event is set (at the latest on leaving): a signal sent to a run once
    `len(server.requests) > answered` lands mid-batch however fast the run goes. Yields (server,
    release)."""
    release = threading.Event()

    def answer(_body: dict[str, Any]) -> Reply:
        if len(server.requests) > answered:
            release.wait(300)
        return text(reply)

    with MessagesServer(responder=answer) as server:
        try:
            yield server, release
        finally:
            release.set()
