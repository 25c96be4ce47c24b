"""Proves the fake Messages API works with the real ``anthropic`` SDK.

Other tests rely on it for retry/timeout/tool-loop behaviour, so these check
that the SDK parses our responses and applies its own retry/timeout policy.
"""

from __future__ import annotations

import json
import time

import anthropic
import pytest

from tests.support.fixtures import messages_server  # noqa: F401 - fixture
from tests.support.messages_server import (
    MessagesServer,
    delay,
    error,
    raw,
    text,
    tool_use,
)

MODEL = "claude-test"


def _client(srv: MessagesServer, **kw: object) -> anthropic.Anthropic:
    kw.setdefault("max_retries", 0)
    return anthropic.Anthropic(api_key="test", base_url=srv.url, **kw)  # type: ignore[arg-type]


def _ask(client: anthropic.Anthropic, content: object = "hi") -> anthropic.types.Message:
    return client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": content}],  # type: ignore[list-item]
    )


def test_text_round_trip_with_usage(messages_server: MessagesServer) -> None:  # noqa: F811
    messages_server.script(text("hello"))
    msg = _ask(_client(messages_server))

    assert msg.type == "message" and msg.role == "assistant"
    assert msg.model == MODEL
    assert msg.stop_reason == "end_turn"
    assert isinstance(msg.content[0], anthropic.types.TextBlock)
    assert msg.content[0].text == "hello"
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens >= 1
    assert msg.id.startswith("msg_")

    assert messages_server.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
    headers = messages_server.request_headers[0]
    # SDK 2.x sends the key as a bearer token; 0.x sent x-api-key.
    assert headers.get("x-api-key") == "test" or headers.get("authorization") == "Bearer test"
    assert "anthropic-version" in headers


def test_tool_use_then_tool_result_recorded(messages_server: MessagesServer) -> None:  # noqa: F811
    messages_server.script(tool_use("lookup", {"q": "cats"}, text="Let me check."), text("done"))
    client = _client(messages_server)
    first = _ask(client, "find cats")

    assert first.stop_reason == "tool_use"
    assert isinstance(first.content[0], anthropic.types.TextBlock)
    block = first.content[1]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    assert block.name == "lookup" and block.input == {"q": "cats"}
    assert block.id.startswith("toolu_01")

    second = client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[
            {"role": "user", "content": "find cats"},
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "3 cats"}],
            },
        ],
    )
    assert second.content[0].text == "done"  # type: ignore[union-attr]

    assert len(messages_server.requests) == 2
    last = messages_server.requests[1]["messages"][-1]["content"][0]
    assert last == {"type": "tool_result", "tool_use_id": block.id, "content": "3 cats"}
    assert messages_server.requests[1]["messages"][1]["content"][1]["type"] == "tool_use"


def test_rate_limit_then_success_is_retried(messages_server: MessagesServer) -> None:  # noqa: F811
    messages_server.script(error(429, headers={"retry-after": "0"}), text("ok"))
    msg = _ask(_client(messages_server, max_retries=2))
    assert msg.content[0].text == "ok"  # type: ignore[union-attr]
    assert len(messages_server.requests) == 2


def test_rate_limit_without_retries_raises(messages_server: MessagesServer) -> None:  # noqa: F811
    messages_server.script(error(429, "slow down"))
    with pytest.raises(anthropic.RateLimitError) as exc_info:
        _ask(_client(messages_server))
    assert exc_info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert "slow down" in str(exc_info.value)


def test_repeated_500_exhausts_retries(messages_server: MessagesServer) -> None:  # noqa: F811
    messages_server.script(error(500), error(500), error(500))
    with pytest.raises(anthropic.InternalServerError):
        _ask(_client(messages_server, max_retries=1))
    assert len(messages_server.requests) == 2
    assert messages_server.pending == 1


def test_delay_longer_than_timeout_raises(messages_server: MessagesServer) -> None:  # noqa: F811
    messages_server.script(delay(10, then=text("late")))
    started = time.monotonic()
    with pytest.raises(anthropic.APITimeoutError):
        _ask(_client(messages_server, timeout=0.5, max_retries=0))
    assert time.monotonic() - started < 5


def test_responder_fallback_and_no_reply() -> None:
    seen: list[str] = []

    def responder(body: dict) -> object:
        seen.append(body["messages"][-1]["content"])
        return text("echo: " + seen[-1]) if len(seen) == 1 else None

    with MessagesServer(responder=responder) as srv:  # type: ignore[arg-type]
        client = _client(srv)
        srv.script("scripted first")
        assert _ask(client, "a").content[0].text == "scripted first"  # type: ignore[union-attr]
        assert _ask(client, "b").content[0].text == "echo: b"  # type: ignore[union-attr]
        assert _ask(client, "c").content[0].text == "NO_REPLY"  # type: ignore[union-attr]
    assert seen == ["b", "c"]


def test_malformed_raw_response_and_count_tokens(messages_server: MessagesServer) -> None:  # noqa: F811
    client = _client(messages_server)
    count = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hello"}])
    assert count.input_tokens > 0
    assert messages_server.requests == []  # count_tokens is tracked separately
    assert len(messages_server.count_tokens_requests) == 1

    # The SDK surfaces an undecodable 200 body as a bare json.JSONDecodeError.
    messages_server.script(raw(200, b"{not json", "application/json"))
    with pytest.raises(json.JSONDecodeError):
        _ask(client)


def test_stream_request_rejected(messages_server: MessagesServer) -> None:  # noqa: F811
    messages_server.script(text("kept"))
    with pytest.raises(anthropic.BadRequestError, match="streaming is not supported"):
        _client(messages_server).messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}], stream=True
        )
    assert messages_server.pending == 1


def _cached_ask(client: anthropic.Anthropic, stable: str, volatile: str, breakpoints: int = 1):
    blocks = [{"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}}]
    blocks += [
        {"type": "text", "text": f"{n}", "cache_control": {"type": "ephemeral"}}
        for n in range(breakpoints - 1)
    ]
    return client.messages.create(
        model=MODEL,
        max_tokens=64,
        system=[*blocks, {"type": "text", "text": volatile}],  # type: ignore[list-item]
        messages=[{"role": "user", "content": "hi"}],
    )


def test_cache_usage_is_reported_the_way_the_api_reports_it() -> None:
    stable = "You are a careful assistant. " * 400  # about 3000 tokens
    with MessagesServer(min_cache_tokens=1024) as srv:
        client = _client(srv)
        first = _cached_ask(client, stable, "Now: 09:00").usage
        second = _cached_ask(client, stable, "Now: 09:01").usage
        changed = _cached_ask(client, stable + "!", "Now: 09:02").usage
        short = _cached_ask(client, "short", "Now: 09:03").usage
        with pytest.raises(anthropic.BadRequestError, match="maximum of 4"):
            _cached_ask(client, stable, "x", breakpoints=5)

    assert first.cache_creation_input_tokens > 2500 and first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens  # the prefix, read
    assert second.cache_creation_input_tokens == 0 and 0 < second.input_tokens < 100  # the rest
    assert changed.cache_read_input_tokens == 0 and changed.cache_creation_input_tokens > 2500
    assert (short.cache_creation_input_tokens, short.cache_read_input_tokens) == (0, 0)  # too short
