"""The gateway's routes (DESIGN.md, "Gateway contract"). Every operation is the same function the
CLI and the inbox use (ingest/inbox.py, delivery.py); this module only speaks HTTP.

Every route but /health needs `Authorization: Bearer $CORTEX_INGEST_API_KEY`, compared in constant
time. Errors are JSON `{"error": "one line"}`. Request bodies are capped before they are read whole.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from cortex_pipelines import delivery
from cortex_pipelines.config import CHANNEL_PATTERN, Settings
from cortex_pipelines.ingest.envelope import Envelope, EnvelopeError
from cortex_pipelines.ingest.inbox import Erased, ingest_message
from cortex_pipelines.storage import Database
from cortex_pipelines.storage.bus import counts as bus_counts
from cortex_pipelines.storage.published import BULLETIN, published_row

try:
    VERSION = version("cortex-pipelines")
except PackageNotFoundError:  # run from a checkout that was never installed
    VERSION = "0+unknown"

# Valid text can grow threefold as JSON ("\u00e9" for the two bytes of "é"); the rest of an envelope
# (ids, thread, metadata) gets 64 KiB.
_JSON_GROWTH = 3
_ENVELOPE_ROOM = 64 * 1024


def max_body_bytes(settings: Settings) -> int:
    return _JSON_GROWTH * settings.max_text_bytes + _ENVELOPE_ROOM


class GatewayError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status


class BodyLimit:
    """Refuse a request body over `limit` bytes with 413: at once when Content-Length says so, else
    as soon as the streamed body passes it, so nothing larger is ever held in memory."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = f"request body over the {self.limit}-byte limit"
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            return await _error(413, too_large)(scope, receive, send)
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:  # FastAPI passes an HTTPException through body parsing
                raise HTTPException(413, too_large)
            return message

        await self.app(scope, counted, send)


def _error(status: int, text: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": " ".join(text.split())[:500]}, status_code=status, headers=headers)


class Ingested(BaseModel):
    id: int
    duplicate: bool


class Health(BaseModel):
    status: str  # "ok", or "degraded" while a connector is not running
    version: str
    uptime_s: float
    warmup: str
    bus: dict[str, int]
    outbox: dict[str, int]
    connectors: dict[str, str] = {}


class PollRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    channel: str = Field(pattern=CHANNEL_PATTERN)
    max: int = Field(20, ge=1, le=100)


class OutboxMessage(BaseModel):
    id: int
    channel: str
    text: str
    recipient: dict[str, str | None] = Field(description="chat_id, thread, message_id (the message answered)")
    reply_to: int | None = Field(description="the bus id of the message answered")
    attempt: int
    lease_expires_at: str | None
    created_at: str | None


class Polled(BaseModel):
    messages: list[OutboxMessage]


class AckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[int] = Field(max_length=1000)


class Acked(BaseModel):
    acked: int


class Released(BaseModel):
    released: int


class DeadLetterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[int] = Field(max_length=1000)
    error: str = Field(min_length=1, max_length=500, description="why it cannot be delivered, one line")


class DeadLettered(BaseModel):
    dead_lettered: int


# Module level: with postponed annotations, FastAPI resolves a dependency's names in the module.
_BEARER = HTTPBearer(auto_error=False, description="CORTEX_INGEST_API_KEY")
_ERROR = {"content": {"application/json": {"example": {"error": "one line"}}}}


def create_app(settings: Settings, connectors: Callable[[], dict[str, str]] = dict) -> FastAPI:
    """The gateway for one CORTEX_HOME; `settings.ingest_api_key` must be set. `connectors` tells
    the state of each connector it runs, for /health."""
    if settings.ingest_api_key is None:
        raise ValueError("CORTEX_INGEST_API_KEY is not set")
    key = settings.ingest_api_key.get_secret_value().encode()
    db = Database(settings.paths.db)
    started = time.monotonic()
    app = FastAPI(
        title="Cortex gateway",
        version=VERSION,
        description="Hand messages to Cortex and fetch its replies. Every route but /health and these "
        "docs needs `Authorization: Bearer $CORTEX_INGEST_API_KEY`.",
    )
    app.add_middleware(BodyLimit, limit=max_body_bytes(settings))

    def authorized(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> None:
        given = credentials.credentials.encode() if credentials else b""
        if not hmac.compare_digest(given, key):
            raise GatewayError(401, "missing or wrong key: send Authorization: Bearer $CORTEX_INGEST_API_KEY")

    @app.exception_handler(GatewayError)
    async def _gateway_error(_request, exc: GatewayError):
        return _error(exc.status, str(exc))

    @app.exception_handler(HTTPException)
    async def _http_error(_request, exc: HTTPException):
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_request, exc: RequestValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        if not where:  # FastAPI reads a body as JSON only when its Content-Type says so
            return _error(400, "the body must be a JSON object, sent with Content-Type: application/json")
        return _error(400, f"field {where!r}: {first.get('msg', 'invalid')}")

    @app.exception_handler(Exception)
    async def _internal(_request, exc: Exception):
        return _error(500, f"internal error ({type(exc).__name__}); the gateway's log has the details")

    def _health() -> dict:
        def read(con):
            warm = published_row(con, BULLETIN)
            return bus_counts(con), warm["state"] if warm else "cold"

        bus, warmup = db.run(read)
        states = connectors()
        up = all(state in ("starting", "running") for state in states.values())
        return {
            "status": "ok" if up else "degraded",
            "connectors": states,
            "version": VERSION,
            "uptime_s": round(time.monotonic() - started, 3),
            "warmup": warmup,
            "bus": bus,
            "outbox": delivery.counts(db, settings),
        }

    @app.get("/health", response_model=Health, summary="Is the gateway up, and how full is the bus")
    def health() -> dict:
        return _health()

    @app.post(
        "/ingest",
        status_code=202,
        response_model=Ingested,
        dependencies=[Depends(authorized)],
        summary="Hand in one inbound message (the inbox's envelope)",
        responses={
            200: {"model": Ingested, "description": "a duplicate"},
            400: _ERROR,
            401: _ERROR,
            410: {**_ERROR, "description": "the message was erased (`cortex erase`)"},
            413: _ERROR,
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": Envelope.model_json_schema()}},
            }
        },
    )
    async def ingest(request: Request) -> JSONResponse:
        """Idempotent on (channel, external_id): the same message again answers 200 with its id."""
        body = await request.body()
        try:
            bus_id, duplicate = await run_in_threadpool(ingest_message, body, settings, db, "gateway")
        except Erased as exc:
            raise GatewayError(410, str(exc)) from None
        except EnvelopeError as exc:
            raise GatewayError(400, str(exc)) from None
        return JSONResponse({"id": bus_id, "duplicate": duplicate}, status_code=200 if duplicate else 202)

    @app.post(
        "/outbox/poll",
        response_model=Polled,
        dependencies=[Depends(authorized)],
        summary="Lease replies of a channel",
        responses={400: _ERROR, 401: _ERROR},
    )
    def poll(body: PollRequest) -> dict:
        """Each reply is leased for CORTEX_OUTBOX_LEASE_SECONDS; acknowledge it before the lease runs
        out or it comes back with the next attempt. After CORTEX_OUTBOX_MAX_ATTEMPTS it is
        dead-lettered."""
        if body.channel not in settings.known_channels():
            raise GatewayError(400, f"unknown channel {body.channel!r}")
        return {"messages": delivery.poll(db, settings, body.channel, body.max)}

    @app.post(
        "/outbox/ack",
        response_model=Acked,
        dependencies=[Depends(authorized)],
        summary="Acknowledge delivered replies",
        responses={400: _ERROR, 401: _ERROR},
    )
    def ack(body: AckRequest) -> dict:
        """An acknowledged reply never comes back; `acked` counts those not acknowledged before."""
        return {"acked": delivery.ack(db, settings, body.ids)}

    @app.post(
        "/outbox/release",
        response_model=Released,
        dependencies=[Depends(authorized)],
        summary="Give leased replies back unsent, the attempt not counted",
        responses={400: _ERROR, 401: _ERROR},
    )
    def release(body: AckRequest) -> dict:
        """For a service the connector cannot reach: the replies are due again at once, and an outage
        does not use up their attempts."""
        return {"released": delivery.release(db, body.ids)}

    @app.post(
        "/outbox/dead-letter",
        response_model=DeadLettered,
        dependencies=[Depends(authorized)],
        summary="Give up on replies that cannot be delivered",
        responses={400: _ERROR, 401: _ERROR},
    )
    def dead_letter(body: DeadLetterRequest) -> dict:
        """For a chat that blocked the bot or no longer exists: the reply stops coming back and is
        counted in `cortex status`."""
        return {"dead_lettered": delivery.dead_letter(db, settings, body.ids, body.error)}

    return app
