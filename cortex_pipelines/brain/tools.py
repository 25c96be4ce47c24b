"""The brain's tools: sync (memory_query, fetch_chat_history, seed 002's memory tools, schedules) and
async (sessions_spawn). The memory tools are doors onto memory/control.py, as the CLI and the admin
chat's slash commands are, so a request behaves the same whichever way it came.

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
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cortex_pipelines import clock
from cortex_pipelines.config import ADMIN_CHANNEL, CHANNEL_PATTERN, Settings
from cortex_pipelines.llm.base import ToolCall, ToolSpec
from cortex_pipelines.memory import control
from cortex_pipelines.memory.control import ControlError
from cortex_pipelines.memory.recall import note_use, recall
from cortex_pipelines.proactive import schedules
from cortex_pipelines.proactive.schedules import ScheduleError, ScheduleRequest
from cortex_pipelines.proactive.supervision import system_overview
from cortex_pipelines.storage import Database
from cortex_pipelines.storage import ops as ops_store
from cortex_pipelines.storage import schedules as schedule_store
from cortex_pipelines.storage.bus import BusMessage
from cortex_pipelines.storage.facts import CATEGORIES
from cortex_pipelines.storage.session import conversation_history, conversation_of

# Lengths, ranges and category names are checked by memory/control.py, with the same one-line reason
# for every door; the descriptions tell the model what it will accept.
Categories = Annotated[
    list[str] | None,
    Field(description=f"one or more of: {', '.join(CATEGORIES)}; the first is the primary one"),
]


class MemoryQueryInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(5, ge=1, le=25)


class FetchHistoryInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    conversation: str | None = Field(
        None,
        max_length=1000,
        description="a conversation as the context labels it (channel, channel:chat or channel:chat:thread); "
        "default: the current one",
    )
    limit: int = Field(20, ge=1, le=100)
    before_id: int | None = None


class ForgetInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    fact_id: int
    reason: str = Field("the user asked to forget it", max_length=500)


class UnforgetInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    fact_id: int


class EditInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    fact_id: int
    text: str = Field(description="the new text (replace) or the words to add (append); 3-2000 characters")
    mode: Literal["replace", "append"] = "replace"


class SaveInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str = Field(description="the fact, 3-2000 characters")
    categories: Categories = None
    category: str | None = Field(None, description="one category (use categories for several)")
    importance: float | None = Field(None, description="1 routine, 2 useful (the default), 3 critical")


class UpdateInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    fact_id: int
    importance: float | None = Field(None, description="1 routine, 2 useful, 3 critical")
    categories: Categories = None


class MoveInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    fact_id: int
    categories: list[str] = Field(
        description=f"the new categories, replacing the old: {', '.join(CATEGORIES)}"
    )


class DedupeInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    action: Literal["report", "merge", "delete_older"] = "report"
    threshold: float | None = Field(None, description="similarity from 0.5 to 1 (default 0.95)")
    categories: list[str] | None = Field(None, description="only facts in any of these categories")


class RecentInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: str | None = Field(
        None, description="words to score by; without it, the latest and most important"
    )
    limit: int = 10
    categories: list[str] | None = Field(None, description="only items in any of these categories")


class PinInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str = Field(description="3-2000 characters")
    label: str | None = Field(None, description="a short label, at most 40 characters")


class UnpinInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    position: int = Field(description="1-based, as pin_list shows")


class NoInput(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SpawnInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    task: str = Field(min_length=1, max_length=4000)
    report_to: str | None = Field(None, pattern=CHANNEL_PATTERN)


class ScheduleListInput(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ScheduleDeleteInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(pattern=r"^sch-[0-9a-f]{8}$")


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
        "Fetch earlier messages of one conversation (this one unless named), oldest first, beyond "
        "what the context shows.",
        FetchHistoryInput,
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

# Seed 002's tools, in config.MEMORY_TOOL_NAMES order; CORTEX_MEMORY_TOOLS picks which the owner gets.
MEMORY_TOOLS = [
    _spec(
        "memory_save",
        "Remember a fact the user states or asks you to remember, with its importance and categories.",
        SaveInput,
    ),
    _spec("memory_update", "Change a remembered fact's importance or categories (by fact_id).", UpdateInput),
    _spec(
        "memory_edit",
        "Correct a remembered fact (replace its text) or add to it (append); the result keeps its sources.",
        EditInput,
    ),
    _spec("memory_move", "File a remembered fact under other categories, replacing its own.", MoveInput),
    _spec(
        "memory_forget",
        "Forget a remembered fact (by fact_id from memory_query) when the user says it is wrong or "
        "asks you to forget it. The fact is kept for audit but never recalled again.",
        ForgetInput,
    ),
    _spec("memory_unforget", "Undo memory_forget: the fact is recalled again.", UnforgetInput),
    _spec(
        "memory_dedupe",
        "Find remembered facts that say the same thing (report), or keep the newest of each group and "
        "fold the others into it (merge). delete_older works in the admin chat only.",
        DedupeInput,
    ),
    _spec("memory_stats", "Count what each memory tier holds.", NoInput),
    _spec(
        "memory_recent",
        "Short-term memory: the user's messages and the facts of the last 48 hours, scored by the "
        "query's words, recency and importance.",
        RecentInput,
    ),
    _spec(
        "pin_add",
        "Pin an item to working memory; it is always in context (at most 10, the oldest drops out).",
        PinInput,
    ),
    _spec("pin_list", "List the pinned items with their positions.", NoInput),
    _spec("pin_remove", "Unpin the item at a 1-based position.", UnpinInput),
    _spec("pin_clear", "Unpin every item.", NoInput),
]

ADMIN_TOOLS = [
    _spec(
        "system_inspect",
        "Inspect the system: bus counts, failed messages, pending operations, schedules, "
        "supervision findings, recent Dagster runs and asset freshness.",
        InspectInput,
    ),
]

TOOLS = COMMON_TOOLS + MEMORY_TOOLS + ADMIN_TOOLS


def speaks_for_owner(settings: Settings, msg: BusMessage) -> bool:
    """The owner's own turn, a firing of a schedule the owner made, or (on the router channel) a
    result from a sender that completes delegated work."""
    return settings.speaks_for_owner(msg.channel, msg.sender) or settings.is_owner(msg.channel, msg.sender)


def tools_for(settings: Settings, channel: str, owner: bool) -> list[ToolSpec]:
    """The owner's admin chat gets every tool; the owner elsewhere the common ones and the memory tools
    CORTEX_MEMORY_TOOLS names (all by default); anyone else none."""
    if not owner:
        return []
    if channel == ADMIN_CHANNEL:
        return TOOLS
    return COMMON_TOOLS + [t for t in MEMORY_TOOLS if t.name in settings.memory_tools]


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
            "sessions_spawn": (SpawnInput, self._spawn),
            "schedule_create": (ScheduleRequest, self._schedule_create),
            "schedule_list": (ScheduleListInput, self._schedule_list),
            "schedule_delete": (ScheduleDeleteInput, self._schedule_delete),
            "memory_save": (SaveInput, self._save),
            "memory_update": (UpdateInput, self._update),
            "memory_edit": (EditInput, self._edit),
            "memory_move": (MoveInput, self._move),
            "memory_forget": (ForgetInput, self._forget),
            "memory_unforget": (UnforgetInput, self._unforget),
            "memory_dedupe": (DedupeInput, self._dedupe),
            "memory_stats": (NoInput, lambda _: control.stats(self.db, self.settings)),
            "memory_recent": (RecentInput, self._recent),
            "pin_add": (PinInput, lambda a: asdict(control.pin(self.db, self.settings, a.text, a.label))),
            "pin_list": (NoInput, lambda _: control.pins(self.db)),
            "pin_remove": (UnpinInput, lambda a: control.unpin(self.db, self.settings, a.position)),
            "pin_clear": (NoInput, lambda _: {"unpinned": control.clear_pins(self.db, self.settings)}),
            "system_inspect": (InspectInput, self._inspect),
        }.get(call.name)
        owner = speaks_for_owner(self.settings, self.message)
        if handler is not None and not owner:
            refusal = f"tools act for the owner only; this sender is not an owner of {self.message.channel}"
            return f"{call.name} refused: {refusal}", True
        offered = tools_for(self.settings, self.message.channel, owner)
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
        except (ScheduleError, ControlError) as exc:
            return f"{call.name} failed: {exc}", True

    @property
    def _caller(self) -> control.Caller:
        """The owner's turn that asked: a fact saved now comes from it."""
        return control.Caller("brain", self.session_id, self.message.channel, self.message.sent_at)

    def _memory_query(self, args: MemoryQueryInput) -> list[dict[str, Any]]:
        """Hits with whether the owner said them: another sender's turn is theirs, not the user's,
        and a delegated task's result (a fact of origin `op_harvest`) another agent's."""
        hits = recall(
            self.db,
            self.settings,
            args.query,
            k=args.limit,
            exclude_sources={self.session_id},
            asked_at=self.message.sent_at,
        )
        note_use(self.db, self.settings, hits)
        return [
            {
                **hit.as_dict(ZoneInfo(self.settings.timezone)),
                "said_by_owner": not hit.delegated
                and (hit.fact_id is not None or self.settings.said_by_owner(hit.channel or "", hit.sender)),
            }
            for hit in hits
        ]

    def _save(self, args: SaveInput) -> dict[str, Any]:
        categories = args.categories or ([args.category] if args.category else ["fact"])
        saved = control.save(
            self.db, self.settings, args.text, self._caller, categories=categories, importance=args.importance
        )
        return asdict(saved)

    def _update(self, args: UpdateInput) -> dict[str, Any]:
        return control.update(
            self.db,
            self.settings,
            args.fact_id,
            self._caller,
            importance=args.importance,
            categories=args.categories,
        )

    def _edit(self, args: EditInput) -> dict[str, Any]:
        edited = control.edit(self.db, self.settings, args.fact_id, args.text, self._caller, mode=args.mode)
        return asdict(edited)

    def _move(self, args: MoveInput) -> dict[str, Any]:
        return control.move(self.db, self.settings, args.fact_id, args.categories, self._caller)

    def _forget(self, args: ForgetInput) -> dict[str, Any]:
        return asdict(control.forget(self.db, self.settings, args.fact_id, self._caller, args.reason))

    def _unforget(self, args: UnforgetInput) -> dict[str, Any]:
        return asdict(control.unforget(self.db, self.settings, args.fact_id, self._caller))

    def _dedupe(self, args: DedupeInput) -> dict[str, Any]:
        """delete_older drops the older facts' sources from what is kept (a merge keeps them): the owner
        decides that at the admin chat or the command line, not a model on a channel others reach."""
        if args.action == "delete_older" and self.message.channel != ADMIN_CHANNEL:
            raise ControlError(
                "delete_older is for the admin chat and the command line; merge keeps every source"
            )
        found = control.dedupe(
            self.db,
            self.settings,
            self._caller,
            action=args.action,
            threshold=args.threshold,
            categories=args.categories,
        )
        return found.as_dict()

    def _recent(self, args: RecentInput) -> list[dict[str, Any]]:
        items = control.recent(
            self.db,
            self.settings,
            args.query,
            limit=args.limit,
            categories=args.categories,
            exclude_turns=frozenset({self.session_id}),
        )
        return [item.as_dict() for item in items]

    def _fetch_history(self, args: FetchHistoryInput) -> list[dict[str, Any]]:
        """Turns with whether the owner said them, as memory_query's hits: a stranger in the chat
        is not the user."""
        conversation = args.conversation or self.db.run(conversation_of, self.session_id)
        turns = self.db.run(conversation_history, conversation, args.limit, args.before_id)
        return [
            {
                "id": t.id,
                "role": t.role,
                "sender": t.sender,
                "said_by_owner": t.role == "user" and self.settings.said_by_owner(t.channel, t.sender),
                "text": t.content,
                "at": t.ts.isoformat(timespec="minutes"),
            }
            for t in turns
        ]

    def _spawn(self, args: SpawnInput) -> dict[str, Any]:
        op_id = self.db.run(
            ops_store.spawn,
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
        return [schedules.describe(job) for job in self.db.run(schedule_store.active_schedules)]

    def _schedule_delete(self, args: ScheduleDeleteInput) -> dict[str, Any]:
        return {"id": args.id, "deleted": self.db.run(schedule_store.delete_schedule, args.id)}

    def _inspect(self, _: InspectInput) -> dict[str, Any]:
        overview = self.db.run(system_overview)
        if self.inspect is not None:
            overview["dagster"] = self.inspect()
        return overview
