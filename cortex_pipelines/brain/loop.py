"""The nine steps of seed 000, strictly serial, draining the bus in priority order.

A message's reply, outbox rows, op acknowledgements and completion commit in one DuckDB
transaction, so a crash at any point before that commit leaves the message in 'processing';
the next drainer (after taking the lease) puts it back in the queue and answers it exactly once.
Each reply's file is exported right after its commit; a drainer first exports whatever a killed
one committed and never exported.
No connection is held while the LLM thinks.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import duckdb
import numpy as np

from cortex_pipelines import clock
from cortex_pipelines.brain.context import SILENCE, Context, assemble
from cortex_pipelines.brain.linger import Linger
from cortex_pipelines.brain.output import Output, marked_cut_short, parse
from cortex_pipelines.brain.tools import ToolRunner, speaks_for_owner, tools_for
from cortex_pipelines.config import ADMIN_CHANNEL, ROUTER_CHANNEL, Settings, is_firing
from cortex_pipelines.llm.base import LLMClient, LLMError, LLMRefused, LLMRequest, LLMResponse, ToolCall
from cortex_pipelines.llm.recorded import complete_recorded
from cortex_pipelines.memory import tail
from cortex_pipelines.memory.embedder import Embedder, embedder_for
from cortex_pipelines.memory.pipeline import embedder_id, turn_lines
from cortex_pipelines.memory.recall import Hit, recall, recall_query
from cortex_pipelines.memory.superseding import link_update
from cortex_pipelines.proactive import schedules
from cortex_pipelines.proactive.supervision import (
    fail_overdue_work,
    recover_interrupted_work,
    release_stopped_work,
    undo_unanswered,
)
from cortex_pipelines.publish.safe import one_line, redact_secrets
from cortex_pipelines.storage import Database, bus, health, lease, outbox, turn_vectors
from cortex_pipelines.storage import ops as ops_store
from cortex_pipelines.storage.bus import BusMessage
from cortex_pipelines.storage.checkpoints import record_checkpoint
from cortex_pipelines.storage.db import utcnow
from cortex_pipelines.storage.published import count_cold_dispatch
from cortex_pipelines.storage.session import append_inbound, append_reply, mark_read
from cortex_pipelines.text import forwarded

log = logging.getLogger(__name__)

Log = Callable[[str], None]


@dataclass
class DrainReport:
    processed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    skipped: int = 0
    recovered: int = 0
    orphaned_ops: int = 0
    llm_calls: int = 0
    replies: list[dict] = field(default_factory=list)


@dataclass
class Routed:
    delivered: list[str] = field(default_factory=list)
    shadow: list[str] = field(default_factory=list)
    suppressed: list[str] = field(default_factory=list)


def route(output: Output, settings: Settings) -> Routed:
    """live → outbox, shadow → recorded only, off or unknown → never sent."""
    routed = Routed()
    for target in output.targets:
        mode = settings.mode_for(target) if target in settings.known_channels() else "off"
        {"live": routed.delivered, "shadow": routed.shadow, "off": routed.suppressed}[mode].append(target)
    return routed


def _reply_summary(output: Output, routed: Routed) -> str:
    """Where the reply went and what it said, shortened, for the run log."""
    if output.silence or not output.text:
        return f"{SILENCE} ({output.silence or 'empty'})"
    targets = [*routed.delivered, *(f"{c} (shadow)" for c in routed.shadow)]
    targets += [f"{c} (off)" for c in routed.suppressed]
    return f"{', '.join(targets) or 'nowhere'}: {one_line(output.text, 120)}"


def is_interrupt(exc: BaseException) -> bool:
    """SIGINT or SIGTERM as it reaches the brain: KeyboardInterrupt, Dagster's
    DagsterExecutionInterruptedError during a step (named here: this module runs without Dagster),
    or, landing during a DuckDB query, that query's "Query interrupted"."""
    if isinstance(exc, KeyboardInterrupt | duckdb.InterruptException):
        return True
    if any(cls.__name__ == "DagsterExecutionInterruptedError" for cls in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and str(exc).startswith("Query interrupted")


def _still_holding(con, bus_id: int) -> None:
    """Raises LeaseLost when another process took the lease over while this one waited on the model:
    the message is the new holder's now, as are the reminders and delegated work it made for it (a
    timed-out call of the old holder had deleted them and set the message back to pending, to be
    answered twice)."""
    if not lease.held(con):
        raise lease.LeaseLost(f"the brain lease was taken over while bus #{bus_id} was answered")


def _put_back_uncounted(con, bus_id: int) -> None:
    _still_holding(con, bus_id)
    undo_unanswered(con, [bus_id])
    bus.put_back_uncounted(con, bus_id)


def _heartbeat_and_claim(con) -> BusMessage | None:
    lease.heartbeat(con)
    return bus.claim_next(con)


def reply_channel(msg: BusMessage) -> str:
    """Where a reply goes unless the model says otherwise: a schedule's firing answers on the
    channel the job names; everything else answers where it came from."""
    if is_firing(msg.channel, msg.sender) and msg.metadata.get("target_channel"):
        return str(msg.metadata["target_channel"])
    return msg.channel


def _outcome(call: ToolCall, content: str, is_error: bool) -> tuple[str, str, str, bool]:
    """A tool call and what it gave, so that the same call with the same input and the same result
    compares equal."""
    return call.name, json.dumps(call.input, sort_keys=True, default=str), content, is_error


def _past_deadline(context: Context) -> list[dict]:
    """The failed ops the owner is to be told of: work past its deadline. An op orphaned by a crash
    is not: the retried message delegates it again ("orphaned from prior session" had opened the
    retry's reply)."""
    return [op for op in context.failed_ops if ops_store.OVERDUE in str(op.get("result") or "")]


class Brain:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        llm: LLMClient,
        log: Log = lambda _: None,
        inspect: Callable[[], dict] | None = None,
        embedder: Embedder | None = None,
        run_id: str | None = None,
    ):
        self.db, self.settings, self.llm, self.log = db, settings, llm, log
        self.run_id = run_id  # the Dagster run answering: recorded with each reply
        self.embedder = embedder  # None: the instance's model, loaded once per process when needed
        self.inspect = inspect  # the admin chat's view of the Dagster instance

    def drain(
        self, max_messages: int | None = None, linger: Linger | None = None, stop_on_interrupt: bool = False
    ) -> DrainReport:
        """Process every due message; with `linger`, keep answering messages as they arrive until
        it says the run should end, handing it each batch as soon as it is answered. Returns the
        batch not handed on (with `linger`, an empty one). Raises lease.BrainBusy if another
        process is draining. SIGINT or SIGTERM (`is_interrupt`) puts the message being answered
        back in the queue, its attempt not counted; then the drain ends with what it answered
        (`stop_on_interrupt`) or the interrupt goes on."""
        report = DrainReport()
        claimed_since = utcnow()  # what this drain claims is started from now on
        try:
            self.db.run(lease.acquire, "drain", self.settings.lease_timeout_s)
        except lease.BrainBusy:
            bus.ring_doorbell(self.db.path)  # the holder may be lingering: it answers at once
            raise
        try:
            self._export()  # what a killed drainer committed
            self._startup_cleanup(report)
            self._answer_due(report, max_messages)
            while linger is not None:
                answered = report.processed > 0
                if answered:  # at once: not when the next message comes, nor lost if the run dies
                    linger.on_batch(report)
                    report = DrainReport()
                if not linger.wait_for_messages(answered=answered):
                    break
                self._answer_due(report, max_messages)
        except BaseException as exc:
            if not is_interrupt(exc):
                raise
            released = self.db.run(release_stopped_work, self.settings, claimed_since)
            report.processed = max(report.processed - len(released), 0)
            if not stop_on_interrupt:
                raise
            back = f"; back in the queue, the attempt not counted: {released}" if released else ""
            self.log(f"stopped by SIGINT or SIGTERM{back}")
        finally:
            self.db.run(lease.release)
        return report

    def _answer_due(self, report: DrainReport, max_messages: int | None) -> None:
        with self.db.burst():  # a message's 4-5 short transactions share one attachment
            while max_messages is None or report.processed < max_messages:
                msg = self.db.run(_heartbeat_and_claim)
                if msg is None:
                    break
                report.processed += 1
                try:
                    self._process(msg, report)
                except (OSError, duckdb.Error) as exc:
                    if not is_interrupt(exc):  # stopped, not dying: drain puts it back
                        self._note_death(msg, exc)
                    raise

    def _note_death(self, msg: BusMessage, exc: BaseException) -> None:
        """The run ends on an error of the disk or the store; the message goes back to the queue, and
        fails after its last attempt with this as the reason (best effort: the store may be what
        failed)."""
        with contextlib.suppress(OSError, duckdb.Error):
            self.db.run(bus.died_with, msg.id, f"{type(exc).__name__}: {health.one_line(exc)}")

    def _startup_cleanup(self, report: DrainReport) -> None:
        def cleanup(con):
            recovery = recover_interrupted_work(con, self.settings)
            overdue = fail_overdue_work(con, self.settings)
            return recovery.requeued, recovery.failed, recovery.orphaned_ops + len(overdue)

        requeued, failed, orphaned = self.db.run(cleanup)
        report.recovered, report.orphaned_ops = len(requeued) + len(failed), orphaned
        report.failed += len(failed)
        if requeued:
            self.log(f"recovered {len(requeued)} interrupted message(s): {requeued}")
        if failed:
            self.log(f"failed {len(failed)} message(s) that kept interrupting processing: {failed}")
        if orphaned:
            self.log(f"failed {orphaned} orphaned or overdue operation(s)")

    def _process(self, msg: BusMessage, report: DrainReport) -> None:
        skip = None
        if self.settings.mode_for(msg.channel) == "off":
            skip = f"channel {msg.channel!r} is off"
        elif not self.settings.sender_allowed(msg.channel, msg.sender):
            skip = f"sender {msg.sender!r} is not allowed on {msg.channel}"
        if skip is not None:
            self.db.run(bus.mark_skipped, msg.id, skip)
            report.skipped += 1
            self._log_message(msg, None, f"skipped: {skip}")
            return

        vectors, query_vector = self._embed(msg)  # before the transaction: no connection is held

        def begin_turn(con):
            """Steps 3–4 in one short transaction: record the inbound turn with its vectors (so the
            next message finds it by meaning), build the context."""
            session_id = append_inbound(con, msg)
            if vectors is not None:
                turn_vectors.record(con, session_id, *vectors)
            count_cold_dispatch(con, self.settings.paths.memory_bulletin)
            op = note = late = None
            if msg.channel == ROUTER_CHANNEL:
                trusted = self.settings.is_owner(msg.channel, msg.sender)
                op, note = ops_store.complete_from_message(con, msg.text, msg.metadata, trusted)
                if trusted and op is None and msg.metadata.get("op_id"):
                    late = ops_store.overdue(con, str(msg.metadata["op_id"]))
            owner = speaks_for_owner(self.settings, msg)
            return assemble(con, self.settings, msg, session_id, note, owner), op, note, late

        context, completed_op, op_note, late_op = self.db.run(begin_turn)
        if vectors is not None:
            model, vector, sentences = vectors
            tail.keep_recorded(str(self.db.path), model, context.session_id, msg.text, vector, sentences)
        recalled = self._recall(msg, context, query_vector)
        self._note_update(msg, context.session_id)
        hints = {
            "recalled": [hit.as_dict(ZoneInfo(self.settings.timezone)) for hit in recalled],
            # The floor's pins, for a model that answers only from hints (the offline provider);
            # a stranger is never shown the owner's memories.
            "pinned": context.pinned_texts if speaks_for_owner(self.settings, msg) else [],
            "channel": msg.channel,
            "sender": msg.sender,
            "text": msg.text,
            "priority": msg.priority,
            "completed_op": completed_op,
            "failed_ops": self._failures_to_tell(msg, context),
            "op_note": op_note,
            "late_op": late_op and {**late_op, "result": msg.text},
            "now": clock.now().astimezone(schedules.zone(self.settings.timezone)).isoformat(),
            "sent_at": msg.sent_at.replace(tzinfo=UTC).isoformat(),  # "in 10 minutes" counts from it
            "timezone": self.settings.timezone,
            "schedule": msg.metadata if is_firing(msg.channel, msg.sender) else None,
        }
        if self._told_already(msg, hints["failed_ops"]):
            self._finish(msg, context, Output("", [], "NO_REPLY"), report)
            return
        try:
            response = self._converse(msg, context, hints, report)
        except LLMRefused:
            self.db.run(_put_back_uncounted, msg.id)
            raise  # no message gets through with these credentials: the run ends, saying which
        except LLMError as exc:
            self._retry_or_fail(msg, context.session_id, str(exc), report)
            return
        except (OSError, duckdb.Error):
            raise  # the disk or the store, not this message: the next run takes it again
        except Exception as exc:  # a defect on one message must not stop the queue behind it
            if is_interrupt(exc):
                raise  # SIGINT or SIGTERM during a query: not the message's fault
            log.exception("answering bus #%s failed", msg.id)
            error = f"internal error: {type(exc).__name__}: {exc}"
            self._retry_or_fail(msg, context.session_id, error, report)
            return
        output = parse(response.text, reply_channel(msg))
        if response.stop_reason == "max_tokens":
            output = marked_cut_short(output)
        self._finish(msg, context, output, report)

    @staticmethod
    def _told_already(msg: BusMessage, failures_to_tell: list[dict]) -> bool:
        """A notice of overdue work whose failure the owner has already been told (a reply answered
        before the notice told it): no model is asked, or one would tell it again."""
        notice = msg.metadata.get("overdue_op") if is_firing(msg.channel, msg.sender) else None
        return notice is not None and notice not in {op["id"] for op in failures_to_tell}

    def _finish(self, msg: BusMessage, context: Context, output: Output, report: DrainReport) -> None:
        routed = route(output, self.settings)
        self.db.run(self._commit, msg, context, output, routed)
        self._export()  # a connector sees the reply at once
        report.completed += 1
        self._log_message(msg, context.session_id, _reply_summary(output, routed))
        for channel in routed.delivered:
            report.replies.append({"bus_id": msg.id, "channel": channel, "text": output.text})

    def _retry_or_fail(self, msg: BusMessage, session_id: int, error: str, report: DrainReport) -> None:
        """Held back for a retry with backoff, or failed for good after the last attempt; the
        messages behind it are answered meanwhile. What its tools did goes with the attempt
        (undo_unanswered): a reminder created before a later model call failed was created again
        by every retry."""

        def put_back(con) -> str:
            _still_holding(con, msg.id)
            undo_unanswered(con, [msg.id])
            settings = self.settings
            return bus.fail_or_retry(con, msg, error, settings.max_attempts, settings.retry_backoff_s)

        state = self.db.run(put_back)
        if state == "failed":
            report.failed += 1
            self._log_message(msg, session_id, f"failed after {msg.attempts} attempt(s): {error}")
        else:
            report.retried += 1
            self._log_message(msg, session_id, f"will be retried: {error}")

    def _log_message(self, msg: BusMessage, session_id: int | None, outcome: str) -> None:
        """One line per processed message for the run log. The texts are untrusted: redacted, on one
        line, shortened; `msg N` names the inbound turn, so an erasure finds the line even when the
        text is too short to search for."""
        turn = f" (msg {session_id})" if session_id is not None else ""
        sender = one_line(msg.sender or "?", 40)
        self.log(f"bus #{msg.id}{turn} {msg.channel} {sender}: {one_line(msg.text, 80)} → {outcome}")

    def _export(self) -> None:
        """Reply files for connectors; an unwritable outbox folder must not stop the brain (the rows
        stay unexported and the next export writes them)."""
        try:
            self.db.run(outbox.export_files, self.settings.paths)
        except OSError as exc:
            self.log(f"reply files not exported now: {exc}")

    def _recall(self, msg: BusMessage, context: Context, query_vector: np.ndarray | None) -> list[Hit]:
        """Auto-recall: the memories most relevant to the message go into its context, so the model
        sees what the user said a minute ago without asking. Strangers get none: they would be
        shown the owner's memories. Returns the ranked hits the model answers from: those of the
        context, which leaves out the foreground the model reads; for a model that reads no
        conversation (the offline provider), those found with the foreground in ("I'm allergic to
        penicillin", then "which medicines must I avoid?" two messages later)."""
        if not self.settings.recall_in_context or not speaks_for_owner(self.settings, msg):
            return []
        query = recall_query(msg.text)
        try:
            hits = self._owners_memories(
                query, {context.session_id, *context.foreground_ids}, query_vector, msg.sent_at
            )
            context.add_recalled(hits, self.settings.recall_context_tokens, ZoneInfo(self.settings.timezone))
            if not self.llm.reads_conversation:
                hits = self._owners_memories(query, {context.session_id}, query_vector, msg.sent_at)
        except (OSError, RuntimeError, ValueError) as exc:  # an embedder that cannot load or run
            self.log(f"message {msg.id} answered without recalled memories ({exc})")
            return []
        return hits

    def _failures_to_tell(self, msg: BusMessage, context: Context) -> list[dict]:
        """Delegated work that failed, told in the owner's reply on the channel it was asked on,
        outside any group thread: told in the next chat the owner wrote in, it reached a family
        group, or a shadow channel that sends nothing (review, helper-42)."""
        if not speaks_for_owner(self.settings, msg) or msg.thread:
            return []
        notice = msg.metadata.get("overdue_op") if is_firing(msg.channel, msg.sender) else None
        where = reply_channel(msg)  # a firing's: a notice of overdue work goes where it was asked
        return [
            op for op in _past_deadline(context) if op.get("expected_channel") == where or op["id"] == notice
        ]

    def _owners_memories(
        self, query: str, exclude: set[int], query_vector: np.ndarray | None, asked_at: datetime
    ) -> list[Hit]:
        # A stranger's words are theirs, never "what the user said before": left out before the top k
        # is cut, so that a group chat's lines take none of the owner's places.
        return recall(
            self.db,
            self.settings,
            query,
            k=self.settings.recall_in_context,
            exclude_sources=exclude,
            query_vector=query_vector,
            owners_only=True,
            asked_at=asked_at,
        )

    def _note_update(self, msg: BusMessage, session_id: int) -> None:
        """Knowledge updates, at write time so the next message sees them (memory/superseding.py);
        none from a forwarded message, whose words are someone else's."""
        if not speaks_for_owner(self.settings, msg) or forwarded(msg.text):
            return
        try:
            embedder = self.embedder or embedder_for(self.settings)
            said = link_update(
                self.db, self.settings, embedder, msg.text, session_id, (msg.channel, msg.sender)
            )
        except (OSError, RuntimeError, ValueError) as exc:  # an embedder that cannot load or run
            self.log(f"message {msg.id}: updates not checked ({exc})")
            return
        if said:
            self.log(f"message {msg.id} {said}")

    def _embed(self, msg: BusMessage) -> tuple[tuple[str, np.ndarray, np.ndarray] | None, np.ndarray | None]:
        """Write-through indexing: the turn's vectors as episodic indexing would store them, and
        in the same encode the vector of what auto-recall will search for. An embedder that cannot
        load leaves the turn to that indexing run, never fails the message."""
        try:
            embedder = self.embedder or embedder_for(self.settings)
            lines = turn_lines(msg.sender, msg.text, True)
            encoded = embedder.encode_few([*lines, recall_query(msg.text)])
        except (OSError, RuntimeError, ValueError) as exc:
            self.log(f"message {msg.id} not embedded now ({exc}); episodic indexing will")
            return None, None
        return (embedder_id(embedder), encoded[0], encoded[1:-1]), encoded[-1]

    def _converse(self, msg: BusMessage, context: Context, hints: dict, report: DrainReport) -> LLMResponse:
        messages = list(context.messages)
        runner = ToolRunner(self.db, self.settings, msg, context.session_id, self.inspect)
        rounds = self.settings.max_tool_rounds
        tools = tools_for(self.settings, msg.channel, speaks_for_owner(self.settings, msg))
        made: set[tuple[str, str, str, bool]] = set()
        in_circles = False
        for round_no in range(rounds + 1):
            request = LLMRequest(
                system=context.system,
                stable_system=tuple(context.stable),
                messages=messages,
                tools=tools,
                allow_tools=round_no < rounds and not in_circles,
                max_tokens=self.settings.max_output_tokens,
                hints=hints,
            )
            response = self._call(request, msg.id, report)
            if response.tool_calls and request.allow_tools:
                results, outcomes = [], set()
                for call in response.tool_calls:
                    content, is_error = runner.run(call)
                    self._log_tool_call(msg, call, content, is_error)
                    outcomes.add(_outcome(call, content, is_error))
                    results.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": call.id,
                            "content": content,
                            "is_error": is_error,
                        }
                    )
                # A round of nothing but calls already made, with the same input and the same
                # result, learns nothing new: the next round asks for the answer, not after every
                # round is spent. (A repeat that did something, "unpin the first" twice, differs.)
                in_circles = outcomes <= made
                made |= outcomes
                messages = [
                    *messages,
                    {"role": "assistant", "content": response.content},
                    {"role": "user", "content": results},
                ]
                continue
            if not response.text:
                if response.tool_calls:
                    raise LLMError(f"the model kept calling tools after {round_no} round(s)")
                raise LLMError("the model returned an empty response")
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _log_tool_call(self, msg: BusMessage, call: ToolCall, content: str, is_error: bool) -> None:
        """A tool call in full, as one log event: its input and result (credentials redacted)."""
        given = json.dumps(call.input, ensure_ascii=False, default=str)
        result = f"error: {content}" if is_error else content
        self.log(redact_secrets(f"bus #{msg.id} tool {call.name} {given} → {result}"))

    def _call(self, request: LLMRequest, bus_id: int, report: DrainReport) -> LLMResponse:
        report.llm_calls += 1
        return complete_recorded(self.db, self.llm, request, bus_id=bus_id)

    def _commit(self, con, msg: BusMessage, context: Context, output: Output, routed: Routed) -> None:
        """Steps 8–9 in one transaction: record, outbox, acknowledge, checkpoint. Nothing when the
        lease was taken over while the model answered: the new holder answers the message again."""
        _still_holding(con, msg.id)
        channel = output.targets[0] if output.targets else msg.channel
        meta = {
            "silence": output.silence,
            "delivered": routed.delivered,
            "shadow": routed.shadow,
            "suppressed": routed.suppressed,
        }
        owners = sorted(self.settings.owner_ids(channel))
        reply_id = append_reply(con, msg.id, channel, output.text or SILENCE, meta, owners)
        for target in routed.delivered:
            if target != ADMIN_CHANNEL:  # `cortex chat` delivers admin replies itself, from the session
                to_owners = sorted(self.settings.owner_ids(target))
                outbox.add(con, msg.id, target, output.text, to_owners, run_id=self.run_id)
        if speaks_for_owner(self.settings, msg) and routed.delivered and not output.silence:
            # Told the owner, not a stranger, and sent: a failed op only where it was asked.
            told = {op["id"] for op in self._failures_to_tell(msg, context)}
            untold = {op["id"] for op in _past_deadline(context)} - told
            ops_store.acknowledge(con, [i for i in context.shown_op_ids if i not in untold])
            bus.mark_failures_shown(con, context.shown_failure_ids)
        mark_read(con, context.session_id)
        bus.mark_completed(con, msg.id)
        record_checkpoint(con, msg.id, reply_id)
