"""The brain's tools: sync (memory_query, fetch_chat_history) and async (sessions_spawn).

Tool inputs come from a model and are validated like any other untrusted input; a bad call
gets an error result the model can read, never an exception that kills the turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cortex_pipelines.config import CHANNEL_PATTERN, Settings
from cortex_pipelines.llm.base import ToolCall, ToolSpec
from cortex_pipelines.memory import store as memory_store
from cortex_pipelines.memory.recall import recall
from cortex_pipelines.storage import Database
from cortex_pipelines.storage import ops as ops_store
from cortex_pipelines.storage.bus import BusMessage
from cortex_pipelines.storage.session import channel_history


class MemoryQueryInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(5, ge=1, le=25)


class FetchHistoryInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    channel: str = Field(pattern=CHANNEL_PATTERN)
    limit: int = Field(20, ge=1, le=100)
    before_id: int | None = None


class ForgetInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    fact_id: int
    reason: str = Field("the user asked to forget it", max_length=500)


class EditInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    fact_id: int
    text: str = Field(min_length=3, max_length=1000)


class SpawnInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    task: str = Field(min_length=1, max_length=4000)
    report_to: str | None = Field(None, pattern=CHANNEL_PATTERN)


def _spec(name: str, description: str, model: type[BaseModel]) -> ToolSpec:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return ToolSpec(name, description, schema)


TOOLS = [
    _spec(
        "memory_query",
        "Search long-term memory and past conversation across all channels. Returns matching "
        "items with the ids of the messages they came from.",
        MemoryQueryInput,
    ),
    _spec(
        "fetch_chat_history",
        "Fetch earlier messages of one channel, oldest first, beyond what the context shows.",
        FetchHistoryInput,
    ),
    _spec(
        "memory_forget",
        "Forget a remembered fact (by fact_id from memory_query) when the user says it is wrong or "
        "asks you to forget it. The fact is kept for audit but never recalled again.",
        ForgetInput,
    ),
    _spec(
        "memory_edit",
        "Correct a remembered fact: the new text replaces it and keeps its sources.",
        EditInput,
    ),
    _spec(
        "sessions_spawn",
        "Delegate a longer task to a worker agent. Returns an operation id at once; the result "
        "arrives later as a message on the router channel.",
        SpawnInput,
    ),
]


@dataclass
class ToolRunner:
    """Executes tool calls on behalf of one inbound message."""

    db: Database
    settings: Settings
    message: BusMessage
    session_id: int  # the inbound turn, never returned as its own memory

    def run(self, call: ToolCall) -> tuple[str, bool]:
        """Return (content, is_error) for a tool_result block."""
        handler = {
            "memory_query": (MemoryQueryInput, self._memory_query),
            "fetch_chat_history": (FetchHistoryInput, self._fetch_history),
            "memory_forget": (ForgetInput, self._forget),
            "memory_edit": (EditInput, self._edit),
            "sessions_spawn": (SpawnInput, self._spawn),
        }.get(call.name)
        if handler is None:
            return f"unknown tool {call.name!r}; available: {', '.join(t.name for t in TOOLS)}", True
        model, fn = handler
        try:
            args = model.model_validate(call.input if isinstance(call.input, dict) else {})
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ()))
            return f"invalid input for {call.name}: {field}: {first.get('msg')}", True
        return json.dumps(fn(args), ensure_ascii=False, default=str), False

    def _memory_query(self, args: MemoryQueryInput) -> list[dict[str, Any]]:
        return [
            hit.as_dict()
            for hit in recall(
                self.db, self.settings, args.query, k=args.limit, exclude_sources={self.session_id}
            )
        ]

    def _forget(self, args: ForgetInput) -> dict[str, Any]:
        done = self.db.run(memory_store.forget, args.fact_id, f"brain: {args.reason}")
        return {"fact_id": args.fact_id, "forgotten": done}

    def _edit(self, args: EditInput) -> dict[str, Any]:
        new_id = self.db.run(memory_store.edit, args.fact_id, args.text)
        if new_id is None:
            return {"fact_id": args.fact_id, "error": "no active fact with that id"}
        return {"fact_id": new_id, "replaces": args.fact_id}

    def _fetch_history(self, args: FetchHistoryInput) -> list[dict[str, Any]]:
        turns = self.db.run(channel_history, args.channel, args.limit, args.before_id)
        return [
            {
                "id": t.id,
                "role": t.role,
                "sender": t.sender,
                "text": t.content,
                "at": t.ts.isoformat(timespec="minutes"),
            }
            for t in turns
        ]

    def _spawn(self, args: SpawnInput) -> dict[str, Any]:
        op_id = ops_store.spawn(
            self.db,
            self.message.id,
            args.task,
            args.report_to or self.message.channel,
            self.settings.op_deadline_hours,
        )
        return {"op_id": op_id, "status": "pending"}
