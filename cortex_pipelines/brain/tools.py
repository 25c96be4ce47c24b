"""The brain's tools: sync (memory_query, fetch_chat_history) and async (sessions_spawn).

Tool inputs come from a model and are validated like any other untrusted input; a bad call
gets an error result the model can read, never an exception that kills the turn.

Tools act for the owner only. A turn from anyone else (a sender that is not an owner of its
channel) gets no tools at all: not the ones that change memory, pins, schedules or delegate work,
and not the read-only ones either, since memory_query and fetch_chat_history would let whoever
asked search the owner's whole memory and every channel's history, the admin chat's included. The
model answers a stranger from its context alone, and the runner refuses any tool it names anyway.
A schedule's firing acts for the owner: only an owner's turn can create a schedule.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cortex_pipelines import clock
from cortex_pipelines.config import ADMIN_CHANNEL, CHANNEL_PATTERN, Settings
from cortex_pipelines.llm.base import ToolCall, ToolSpec
from cortex_pipelines.memory import store as memory_store
from cortex_pipelines.memory.recall import note_use, recall
from cortex_pipelines.memory.store import CATEGORIES, FactDraft
from cortex_pipelines.proactive import schedules
from cortex_pipelines.proactive.schedules import ScheduleError, ScheduleRequest
from cortex_pipelines.proactive.supervision import system_overview
from cortex_pipelines.storage import Database
from cortex_pipelines.storage import ops as ops_store
from cortex_pipelines.storage.bus import BusMessage
from cortex_pipelines.storage.session import PIN_LIMIT, add_pin, channel_history, remove_pin


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


class ScheduleListInput(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ScheduleDeleteInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(pattern=r"^sch-[0-9a-f]{8}$")


class SaveInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str = Field(min_length=3, max_length=1000)
    category: Literal[CATEGORIES] = "fact"  # type: ignore[valid-type]
    importance: float = Field(0.7, ge=0, le=1)


class PinInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str = Field(min_length=1, max_length=1000)
    label: str | None = Field(None, max_length=40)


class UnpinInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    position: int = Field(ge=1, le=PIN_LIMIT)


class InspectInput(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _spec(name: str, description: str, model: type[BaseModel]) -> ToolSpec:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return ToolSpec(name, description, schema)


COMMON_TOOLS = [
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
    _spec(
        "schedule_create",
        "Create a persistent reminder or scheduled prompt. Give `cron` (5 fields, e.g. '0 9 * * 1' for "
        "Mondays at 9) for a recurring job or `at` (ISO time) for a one-shot one, read in `timezone`. "
        "When it fires you get `action` as a message and your reply goes to `target_channel`.",
        ScheduleRequest,
    ),
    _spec("schedule_list", "List the active schedules with their next firing.", ScheduleListInput),
    _spec("schedule_delete", "Delete a schedule by its id (sch-...).", ScheduleDeleteInput),
]

ADMIN_TOOLS = [
    _spec("memory_save", "Save a memory directly (admin channel only).", SaveInput),
    _spec("pin_add", "Pin an item to working memory; it is always in context (at most 10).", PinInput),
    _spec("pin_remove", "Unpin the item at a 1-based position.", UnpinInput),
    _spec(
        "system_inspect",
        "Inspect the system: bus counts, failed messages, pending operations, schedules, "
        "supervision findings, recent Dagster runs and asset freshness.",
        InspectInput,
    ),
]

TOOLS = COMMON_TOOLS + ADMIN_TOOLS


def speaks_for_owner(settings: Settings, msg: BusMessage) -> bool:
    """The owner's own turn, or a firing of a schedule the owner made."""
    firing = msg.channel == schedules.CHANNEL and msg.sender == schedules.SENDER
    return firing or settings.is_owner(msg.channel, msg.sender)


def tools_for(channel: str, owner: bool) -> list[ToolSpec]:
    """The owner's admin chat gets full access, the owner elsewhere the common tools, others none."""
    if not owner:
        return []
    return TOOLS if channel == ADMIN_CHANNEL else COMMON_TOOLS


@dataclass
class ToolRunner:
    """Executes tool calls on behalf of one inbound message."""

    db: Database
    settings: Settings
    message: BusMessage
    session_id: int  # the inbound turn, never returned as its own memory
    inspect: Callable[[], dict[str, Any]] | None = None  # system overview, given by the admin chat

    def run(self, call: ToolCall) -> tuple[str, bool]:
        """Return (content, is_error) for a tool_result block."""
        handler = {
            "memory_query": (MemoryQueryInput, self._memory_query),
            "fetch_chat_history": (FetchHistoryInput, self._fetch_history),
            "memory_forget": (ForgetInput, self._forget),
            "memory_edit": (EditInput, self._edit),
            "sessions_spawn": (SpawnInput, self._spawn),
            "schedule_create": (ScheduleRequest, self._schedule_create),
            "schedule_list": (ScheduleListInput, self._schedule_list),
            "schedule_delete": (ScheduleDeleteInput, self._schedule_delete),
            "memory_save": (SaveInput, self._save),
            "pin_add": (PinInput, self._pin),
            "pin_remove": (UnpinInput, self._unpin),
            "system_inspect": (InspectInput, self._inspect),
        }.get(call.name)
        owner = speaks_for_owner(self.settings, self.message)
        if handler is not None and not owner:
            refusal = f"tools act for the owner only; this sender is not an owner of {self.message.channel}"
            return f"{call.name} refused: {refusal}", True
        offered = tools_for(self.message.channel, owner)
        if handler is None or call.name not in {t.name for t in offered}:
            return f"unknown tool {call.name!r}; available: {', '.join(t.name for t in offered)}", True
        model, fn = handler
        try:
            args = model.model_validate(call.input if isinstance(call.input, dict) else {})
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ()))
            return f"invalid input for {call.name}: {field}: {first.get('msg')}", True
        try:
            return json.dumps(fn(args), ensure_ascii=False, default=str), False
        except ScheduleError as exc:
            return f"{call.name} failed: {exc}", True

    def _memory_query(self, args: MemoryQueryInput) -> list[dict[str, Any]]:
        """Hits with whether the owner said them: another sender's turn is theirs, not the user's."""
        hits = recall(self.db, self.settings, args.query, k=args.limit, exclude_sources={self.session_id})
        note_use(self.db, self.settings, hits)
        return [
            {
                **hit.as_dict(),
                "said_by_owner": hit.fact_id is not None
                or self.settings.is_owner(hit.channel or "", hit.sender),
            }
            for hit in hits
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

    def _schedule_create(self, args: ScheduleRequest) -> dict[str, Any]:
        job = self.db.run(
            schedules.create, args, self.settings, clock.now(), self.message.channel, self.message.id
        )
        return schedules.describe(job)

    def _schedule_list(self, _: ScheduleListInput) -> list[dict[str, Any]]:
        return [schedules.describe(job) for job in self.db.run(schedules.active)]

    def _schedule_delete(self, args: ScheduleDeleteInput) -> dict[str, Any]:
        return {"id": args.id, "deleted": self.db.run(schedules.delete, args.id, clock.now())}

    def _save(self, args: SaveInput) -> dict[str, Any]:
        from cortex_pipelines.memory.pipeline import save_fact

        draft = FactDraft(
            args.text,
            args.category,
            args.importance,
            (self.session_id,),
            (self.message.channel,),
            self.message.sent_at,
            origin="admin",
        )
        report = save_fact(self.db, self.settings, draft)
        return {"new": report.new, "reinforced": report.reinforced}

    def _pin(self, args: PinInput) -> dict[str, Any]:
        return {"pins": len(self.db.run(add_pin, args.text, args.label)), "limit": PIN_LIMIT}

    def _unpin(self, args: UnpinInput) -> dict[str, Any]:
        removed = self.db.run(remove_pin, args.position)
        return {"removed": removed["text"] if removed else None}

    def _inspect(self, _: InspectInput) -> dict[str, Any]:
        overview = self.db.run(system_overview)
        if self.inspect is not None:
            overview["dagster"] = self.inspect()
        return overview
