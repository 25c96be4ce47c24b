"""One LLM interface, three implementations: anthropic (the SDK), offline (embedded default),
scripted (tests)."""

from cortex_pipelines.llm.base import LLMClient, LLMError, LLMRequest, LLMResponse, ToolCall
from cortex_pipelines.llm.factory import make_client

__all__ = ["LLMClient", "LLMError", "LLMRequest", "LLMResponse", "ToolCall", "make_client"]
