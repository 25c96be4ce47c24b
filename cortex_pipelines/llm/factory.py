"""Pick the client the settings ask for."""

from __future__ import annotations

from cortex_pipelines.config import Settings
from cortex_pipelines.llm.base import LLMClient


def make_client(settings: Settings, purpose: str = "reply") -> LLMClient:
    if settings.llm_provider == "anthropic":
        from cortex_pipelines.llm.anthropic_client import AnthropicClient

        model = settings.model if purpose == "reply" else settings.extraction_model
        return AnthropicClient(
            model=model,
            api_key=settings.resolved_api_key(),
            base_url=settings.base_url,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_retries,
            prompt_caching=settings.prompt_caching,
        )
    from cortex_pipelines.llm.offline import OfflineClient

    return OfflineClient()
