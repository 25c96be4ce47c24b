"""One LLM interface: anthropic (the SDK) and offline (embedded default) here; tests script replies
with tests/support/scripted_llm.py."""

from cortex_pipelines.llm.base import LLMClient, LLMError, LLMRequest, LLMResponse, ToolCall
from cortex_pipelines.llm.factory import make_client

__all__ = ["LLMClient", "LLMError", "LLMRequest", "LLMResponse", "ToolCall", "make_client"]
