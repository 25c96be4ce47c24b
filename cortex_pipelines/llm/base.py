"""Provider-neutral request/response types. Messages use the Anthropic Messages shape, which the
offline and scripted clients read too, so tool round-trips look the same everywhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class LLMError(RuntimeError):
    """The call failed after the client's own retries; the message will be retried later."""


class LLMRefused(LLMError):
    """The provider refused the credentials (HTTP 401 or 403): no message is at fault and none would
    get through, so the messages wait uncounted and the run says which setting to fix (a wrong key
    had used up every attempt of every message, each run ending on `cortex doctor`'s hint)."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]

    def as_api(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    input: dict[str, Any]


@dataclass
class LLMRequest:
    system: str
    messages: list[dict[str, Any]]
    tools: list[ToolSpec] = field(default_factory=list)
    purpose: str = "reply"
    max_tokens: int = 1024
    allow_tools: bool = True
    # Structured facts about the trigger that the offline client uses instead of parsing prose.
    hints: dict[str, Any] = field(default_factory=dict)
    # Leading blocks of `system`, in order, that stay the same from call to call: the anthropic
    # client ends each with a prompt-cache breakpoint (caching the tools, which come first, too).
    stable_system: tuple[str, ...] = ()

    def system_blocks(self) -> list[tuple[str, bool]]:
        """`system` as (text, cache breakpoint) blocks: the stable ones, then the rest as one block
        (left out when empty: the API refuses an empty text block)."""
        blocks, rest = [], self.system
        for part in self.stable_system:
            if not part or not rest.startswith(part):
                break
            blocks.append((part, True))
            rest = rest[len(part) :].lstrip("\n")
        if rest.strip():
            blocks.append((rest, False))
        return blocks


@dataclass
class LLMResponse:
    text: str
    tool_calls: list[ToolCall]
    content: list[dict[str, Any]]  # assistant content blocks, to append for the next tool round
    stop_reason: str
    input_tokens: int  # what was neither written to nor read from the prompt cache, as the API counts
    output_tokens: int
    model: str
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class LLMClient(Protocol):
    provider: str
    model: str
    # Whether the model reads the conversation it is sent. The offline provider does not: it answers
    # from recalled memories alone, so they must include what the foreground already shows.
    reads_conversation: bool

    def complete(self, request: LLMRequest) -> LLMResponse: ...


def estimate_tokens(text: str) -> int:
    """About four characters a token: good enough for budgets, never used for billing."""
    return max(1, len(text) // 4) if text else 0
