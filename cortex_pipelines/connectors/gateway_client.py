"""A connector's side of the gateway contract (DESIGN.md), over HTTP with the ingest key."""

from __future__ import annotations

import httpx


class GatewayRefused(Exception):
    """401: the key is wrong; retrying cannot help."""


class Rejected(Exception):
    """400 or 413: this message can never go in; str() is the gateway's one line."""


class Erased(Exception):
    """410: the message was erased (`cortex erase`) and stays out."""


class GatewayClient:
    def __init__(self, base_url: str, key: str):
        self.http = httpx.AsyncClient(
            base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30.0
        )

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.aclose()

    async def _post(self, path: str, body: dict) -> dict:
        """Raises httpx.TransportError or httpx.HTTPStatusError (5xx) for what a retry may fix."""
        response = await self.http.post(path, json=body)
        if response.status_code == 401:
            raise GatewayRefused("the gateway refused the key (CORTEX_INGEST_API_KEY)")
        if response.status_code == 410:
            raise Erased(response.json().get("error", response.text))
        if response.status_code in (400, 413):
            raise Rejected(response.json().get("error", response.text))
        response.raise_for_status()
        return response.json()

    async def ingest(self, envelope: dict) -> dict:
        return await self._post("/ingest", envelope)

    async def poll(self, channel: str, limit: int) -> list[dict]:
        return (await self._post("/outbox/poll", {"channel": channel, "max": limit}))["messages"]

    async def ack(self, ids: list[int]) -> int:
        return (await self._post("/outbox/ack", {"ids": ids}))["acked"]

    async def release(self, ids: list[int]) -> int:
        return (await self._post("/outbox/release", {"ids": ids}))["released"]

    async def dead_letter(self, ids: list[int], error: str) -> int:
        return (await self._post("/outbox/dead-letter", {"ids": ids, "error": error}))["dead_lettered"]
