"""A client that replays a script, for tests that need exact LLM behaviour without a server, and
the LLM resource that hands it to Dagster assets."""

from __future__ import annotations

from collections.abc import Callable

from cortex_pipelines.llm.base import LLMClient, LLMError, LLMRequest, LLMResponse, ToolCall, estimate_tokens
from cortex_pipelines.resources import LLMResource, cortex_resources

Step = str | ToolCall | Exception | Callable[[LLMRequest], "LLMResponse | str"]


class ScriptedClient:
    provider = "scripted"
    reads_conversation = True
    model = "scripted"

    def __init__(self, *steps: Step, default: str = "NO_REPLY"):
        self.steps: list[Step] = list(steps)
        self.default = default
        self.requests: list[LLMRequest] = []

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        step: Step = self.steps.pop(0) if self.steps else self.default
        if callable(step) and not isinstance(step, ToolCall):
            step = step(request)
        if isinstance(step, Exception):
            raise step if isinstance(step, LLMError) else LLMError(str(step))
        if isinstance(step, LLMResponse):
            return step
        if isinstance(step, ToolCall):
            return LLMResponse(
                "",
                [step],
                [{"type": "tool_use", "id": step.id, "name": step.name, "input": step.input}],
                "tool_use",
                10,
                5,
                self.model,
            )
        return LLMResponse(
            step,
            [],
            [{"type": "text", "text": step}],
            "end_turn",
            10,
            estimate_tokens(step),
            self.model,
        )


def scripted_resources(home: str, client: ScriptedClient) -> dict:
    """cortex_resources(home) with `client` as the model for every purpose (replies and memory)."""

    class ScriptedLLM(LLMResource):
        def client(self, purpose: str = "reply") -> LLMClient:
            return client

        def memory_client(self) -> LLMClient:
            return client

    resources = cortex_resources(home)
    return {**resources, "llm": ScriptedLLM(settings=resources["settings"])}
