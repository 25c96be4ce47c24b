"""Every LLM call recorded in llm_usage (DESIGN rule 5), in one place instead of at each caller."""

from __future__ import annotations

import time

from cortex_pipelines.llm.base import LLMClient, LLMError, LLMRequest, LLMResponse
from cortex_pipelines.storage import Database, usage


def complete_recorded(
    db: Database, llm: LLMClient, request: LLMRequest, *, asset: str | None = None, bus_id: int | None = None
) -> LLMResponse:
    """Call the model and record the call (tokens, latency, success or the error), then return."""
    started = time.perf_counter()
    try:
        response = llm.complete(request)
    except LLMError as exc:
        db.run(
            usage.record,
            provider=llm.provider,
            model=llm.model,
            purpose=request.purpose,
            input_tokens=0,
            output_tokens=0,
            ok=False,
            error=str(exc),
            asset=asset,
            bus_id=bus_id,
            latency_ms=(time.perf_counter() - started) * 1000,
        )
        raise
    db.run(
        usage.record,
        provider=llm.provider,
        model=response.model,
        purpose=request.purpose,
        input_tokens=response.input_tokens,
        output_tokens=response.output_tokens,
        cache_creation_input_tokens=response.cache_creation_input_tokens,
        cache_read_input_tokens=response.cache_read_input_tokens,
        ok=True,
        asset=asset,
        bus_id=bus_id,
        latency_ms=(time.perf_counter() - started) * 1000,
    )
    return response
