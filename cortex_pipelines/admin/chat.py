"""The owner's admin chat (seed 004): talk to the brain itself on the `admin` channel, which is
always live and has every tool, or run the same tools directly as slash commands.

A question travels the normal path: it goes on the bus (urgent), the brain answers it under the
brain lease. When another process (a `cortex dev` run) holds the lease, that process answers it
and the chat waits for the reply, so the chat works beside a running Dagster instance.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import Callable

from cortex_pipelines import clock
from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import ADMIN_CHANNEL, Settings
from cortex_pipelines.ingest.envelope import validate
from cortex_pipelines.llm.base import LLMClient
from cortex_pipelines.memory import store as memory_store
from cortex_pipelines.memory.recall import note_use, recall
from cortex_pipelines.proactive import schedules
from cortex_pipelines.proactive.supervision import system_overview
from cortex_pipelines.storage import Database, facts, lease
from cortex_pipelines.storage.bus import enqueue_rows
from cortex_pipelines.storage.session import PIN_LIMIT, add_pin, append_owner_note, pins, remove_pin

HELP = """Slash commands (the same tools the brain has here):
  /recall QUERY          search memory
  /save TEXT             remember a fact
  /forget ID [REASON]    forget fact ID (and stop recalling the messages it came from)
  /unforget ID           undo a forget
  /edit ID TEXT          correct fact ID
  /pin TEXT | /unpin N | /pins
  /schedules | /unschedule ID
  /erase ID... | /erase --matching TEXT [--yes]   erase messages (bus ids) and all derived from them
                         (also --turn ID, --sender CHANNEL:ID, --before DATE; filters list until --yes)
  /status                queue, failures, delegated work, schedules, supervision, Dagster runs
  /help | /quit
Anything else is a message to the brain on the admin channel."""

SENDER = "owner"


class AdminChat:
    def __init__(
        self,
        settings: Settings,
        llm: LLMClient,
        inspect: Callable[[], dict] | None = None,
        resync: Callable[[], None] = lambda: None,
        wait_s: float = 300.0,
    ):
        self.settings, self.llm, self.inspect, self.resync = settings, llm, inspect, resync
        self.db = Database(settings.paths.db)
        self.wait_s = wait_s

    def handle(self, line: str) -> str:
        line = line.strip()
        if not line:
            return ""
        if line.startswith("/"):
            return self.command(line)
        return self.ask(line)

    # -- the brain ---------------------------------------------------------------------------

    def ask(self, text: str) -> str:
        envelope = {
            "channel": ADMIN_CHANNEL,
            "text": text,
            "sender": SENDER,
            "priority": "urgent",
            "external_id": "admin-" + uuid.uuid4().hex,
        }
        row = validate(envelope, self.settings, clock.now(), folder_channel=None)
        (bus_id,) = self.db.run(lambda con: enqueue_rows(con, [row], source="cortex chat").inserted)
        deadline = time.monotonic() + self.wait_s
        brain = Brain(self.db, self.settings, self.llm, inspect=self.inspect)
        while time.monotonic() < deadline:
            state, error = self.db.query("SELECT state, error FROM bus WHERE id = ?", [bus_id])[0]
            if state in ("completed", "failed", "skipped"):
                return self._answer(bus_id, state, error)
            try:
                brain.drain(max_messages=1)
            except lease.BrainBusy:
                time.sleep(0.5)  # a running Dagster run drains the bus, ours included
        return f"(no answer within {self.wait_s:.0f} s; message #{bus_id} stays queued)"

    def _answer(self, bus_id: int, state: str, error: str | None) -> str:
        if state != "completed":
            return f"(message #{bus_id} {state}: {error})"
        row = self.db.query("SELECT content FROM session WHERE bus_id = ? AND role = 'assistant'", [bus_id])
        return row[0][0] if row else "(no reply)"

    # -- slash commands ----------------------------------------------------------------------

    def command(self, line: str) -> str:
        try:
            name, *args = shlex.split(line[1:])
        except ValueError as exc:
            return f"cannot parse that: {exc}"
        handler = {
            "help": lambda: HELP,
            "recall": self._recall,
            "save": self._save,
            "forget": self._forget,
            "unforget": self._unforget,
            "edit": self._edit,
            "pin": self._pin,
            "unpin": self._unpin,
            "pins": self._pins,
            "schedules": self._schedules,
            "unschedule": self._unschedule,
            "status": self._status,
            "erase": self._erase,
        }.get(name.lower() if name else "")
        if handler is None:
            return f"unknown command /{name}; /help lists them"
        try:
            return handler(*args)
        except (TypeError, ValueError):
            return f"wrong arguments for /{name}; /help shows how"

    def _recall(self, *words: str) -> str:
        query = " ".join(words).strip()
        if not query:
            return "usage: /recall QUERY"
        hits = recall(self.db, self.settings, query, k=5)
        note_use(self.db, self.settings, hits)
        lines = [
            f"{n}. {h.text}  ({'fact ' + str(h.fact_id) + ', ' if h.fact_id else ''}"
            f"{h.channel or '?'} {h.at:%Y-%m-%d}, messages {h.sources})"
            for n, h in enumerate(hits, 1)
        ]
        return "\n".join(lines) or "nothing found"

    def _save(self, *words: str) -> str:
        from cortex_pipelines.memory.pipeline import save_fact

        text = " ".join(words).strip()
        if len(text) < 3:
            return "usage: /save TEXT"
        note = self.db.run(append_owner_note, ADMIN_CHANNEL, SENDER, f"/save {text}")
        draft = memory_store.FactDraft(
            text, "fact", 0.7, (note,), (ADMIN_CHANNEL,), clock.now().replace(tzinfo=None), "admin"
        )
        report = save_fact(self.db, self.settings, draft)
        if report.new:
            return f"saved as fact {report.new[0]}"
        return f"already known: reinforced fact {report.reinforced[0]}"

    def _forget(self, fact_id: str, *reason: str) -> str:
        why = " ".join(reason) or "asked in the admin chat"
        if not self.db.run(memory_store.forget, int(fact_id), f"admin: {why}"):
            return f"no active fact {fact_id}"
        self.resync()
        return f"forgot fact {fact_id}"

    def _unforget(self, fact_id: str, *reason: str) -> str:
        why = " ".join(reason) or "asked in the admin chat"
        if not self.db.run(facts.unforget, int(fact_id), f"admin: {why}"):
            return f"no forgotten fact {fact_id}"
        self.resync()
        return f"fact {fact_id} is remembered again"

    def _edit(self, fact_id: str, *words: str) -> str:
        new_id = self.db.run(memory_store.edit, int(fact_id), " ".join(words).strip())
        if new_id is None:
            return f"no active fact {fact_id}"
        self.resync()
        return f"fact {fact_id} is now fact {new_id}"

    def _pin(self, *words: str) -> str:
        return f"pinned ({len(self.db.run(add_pin, ' '.join(words), None))}/{PIN_LIMIT})"

    def _unpin(self, position: str) -> str:
        removed = self.db.run(remove_pin, int(position))
        return f"unpinned: {removed['text']}" if removed else f"no pin at position {position}"

    def _pins(self) -> str:
        return "\n".join(f"{n}. {p['text']}" for n, p in enumerate(self.db.run(pins), 1)) or "nothing pinned"

    def _schedules(self) -> str:
        jobs = [schedules.describe(j) for j in self.db.run(schedules.active)]
        return (
            "\n".join(f"{j['id']}: {j['description']} — next {j['next_fire']} ({j['when']})" for j in jobs)
            or "no schedules"
        )

    def _unschedule(self, job_id: str) -> str:
        done = self.db.run(schedules.delete, job_id, clock.now())
        return f"deleted {job_id}" if done else f"no active schedule {job_id}"

    def _erase(self, *words: str) -> str:
        """The same erasure as `cortex erase`, with the same options."""
        from cortex_pipelines.admin import erase as eraser

        ids, turns, named, yes = [], [], {}, False
        args = list(words)
        while args:
            word = args.pop(0)
            if word == "--yes":
                yes = True
            elif word in ("--turn", "--matching", "--sender", "--before") and args:
                value = args.pop(0)
                if word == "--turn":
                    turns.append(int(value))
                else:
                    named[word[2:]] = value
            else:
                ids.append(int(word))  # a ValueError says "wrong arguments"
        try:
            chosen = eraser.selector(ids, turns, **named)
            listing_only = not (ids or turns or yes)
            result = (
                eraser.preview(self.settings, chosen) if listing_only else eraser.erase(self.settings, chosen)
            )
        except eraser.EraseError as exc:
            return str(exc)
        return "\n".join([*result.lines(), *(f"warning: {w}" for w in result.warnings)])

    def _status(self) -> str:
        overview = self.db.run(system_overview)
        if self.inspect is not None:
            overview["dagster"] = self.inspect()
        return json.dumps(overview, indent=2, default=str, ensure_ascii=False)
