"""The official Anthropic SDK. Its own retry loop handles 429 (honouring retry-after), 5xx and
timeouts with backoff; whatever still fails becomes LLMError so the message is retried later."""

from __future__ import annotations

import json

import anthropic

from cortex_pipelines.llm.base import LLMError, LLMRefused, LLMRequest, LLMResponse, ToolCall
from cortex_pipelines.publish.safe import redact_key


def _echoable(block) -> dict:
    """A content block as the next request sends it back. A tool_use input that is no object (a
    string from some models or proxies) becomes no arguments: the API takes only an object there,
    and dumping it as it came printed pydantic's serializer warning."""
    if block.type == "tool_use" and not isinstance(block.input, dict):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
    return block.model_dump(exclude_none=True)


class AnthropicClient:
    provider = "anthropic"
    reads_conversation = True

    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str | None,
        timeout_s: float,
        max_retries: int,
        prompt_caching: bool = True,
    ):
        self.model = model
        self.prompt_caching = prompt_caching
        self._key = api_key
        self._client = anthropic.Anthropic(
            api_key=api_key or "not-needed-for-local-servers",
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
        )

    def complete(self, request: LLMRequest) -> LLMResponse:
        kwargs: dict = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "system": self._system(request),
            "messages": request.messages,
        }
        if request.tools:
            kwargs["tools"] = [t.as_api() for t in request.tools]
            if not request.allow_tools:
                kwargs["tool_choice"] = {"type": "none"}
        try:
            message = self._client.messages.create(**kwargs)
        except anthropic.APIStatusError as exc:
            if _refused(exc):
                said = self._redacted(f"HTTP {exc.status_code}{_said(exc)}")
                fix = "check CORTEX_API_KEY (or ANTHROPIC_API_KEY)"
                raise LLMRefused(f"the model provider refused the API key ({said}): {fix}") from None
            raise LLMError(self._redacted(f"anthropic HTTP {exc.status_code}{_said(exc)}")) from None
        except anthropic.APITimeoutError:
            raise LLMError("anthropic: request timed out") from None
        except anthropic.APIConnectionError as exc:  # the SDK says "Connection error."; its cause says which
            raise LLMError(self._redacted(f"anthropic: connection failed: {exc.__cause__ or exc}")) from None
        except (anthropic.APIError, json.JSONDecodeError, ValueError) as exc:
            raise LLMError(self._redacted(f"anthropic: malformed response: {exc}")) from None
        content = [_echoable(block) for block in message.content]
        texts = [b.text for b in message.content if b.type == "text"]
        calls = [ToolCall(b["id"], b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
        usage = message.usage
        return LLMResponse(
            text="\n".join(texts).strip(),
            tool_calls=calls,
            content=content,
            stop_reason=message.stop_reason or "end_turn",
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            model=message.model or self.model,
            cache_creation_input_tokens=(usage.cache_creation_input_tokens or 0) if usage else 0,
            cache_read_input_tokens=(usage.cache_read_input_tokens or 0) if usage else 0,
        )

    def _system(self, request: LLMRequest) -> str | list[dict]:
        """Text blocks with a cache breakpoint after each stable one (the API caches tools, then
        system, up to a breakpoint); the plain string when nothing is stable or caching is off."""
        if not (self.prompt_caching and request.stable_system):
            return request.system
        blocks = []
        for text, cached in request.system_blocks():
            block: dict = {"type": "text", "text": text}
            if cached:
                block["cache_control"] = {"type": "ephemeral"}
            blocks.append(block)
        return blocks

    def _redacted(self, text: str) -> str:
        """An error as it is stored (bus.error, llm_usage.error, Dagster's run storage) and printed:
        one line, without credentials, the configured key included (some proxies echo it in their
        401). Raised `from None`: the SDK's exception, which Dagster stores as the cause, has it
        verbatim."""
        return " ".join(redact_key(text, self._key).split())[:300]


def _refused(exc: anthropic.APIStatusError) -> bool:
    """The credentials refused: a 401, or a 403 that says so (permission_error). Another 403, from a
    proxy's content filter say, is about the message, which must not wait at the head of the queue
    uncounted for ever (review, helper-58)."""
    if isinstance(exc, anthropic.AuthenticationError):
        return True
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    return (
        isinstance(exc, anthropic.PermissionDeniedError)
        and isinstance(error, dict)
        and (error.get("type") == "permission_error")
    )


def _said(exc: anthropic.APIStatusError) -> str:
    """What the server said, once (" api_error: Internal server error"): the SDK's message
    repeats the status code before the whole body."""
    body = exc.body
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        kind, message = error.get("type"), error.get("message")
        said = ": ".join(str(part) for part in (kind, message) if part)
        return f" {said}" if said else f": {error}"
    return f": {error}" if error else ""
