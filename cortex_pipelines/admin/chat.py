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
from cortex_pipelines.memory import control
from cortex_pipelines.memory.control import ControlError
from cortex_pipelines.memory.recall import note_use, recall
from cortex_pipelines.proactive import schedules
from cortex_pipelines.proactive.supervision import system_overview
from cortex_pipelines.storage import Database, bus, lease
from cortex_pipelines.storage import schedules as schedule_store
from cortex_pipelines.storage.bus import enqueue_rows
from cortex_pipelines.storage.facts import DELEGATED_RESULT
from cortex_pipelines.storage.session import reply_text

HELP = """Slash commands (the same tools the brain has here):
  /recall QUERY          search memory
  /recent [QUERY] [--category C]... [--limit N]
                         short-term memory: the last 48 h by keywords, recency and importance
  /save TEXT [--importance 1-3] [--category C]...   remember a fact (importance 2, category fact)
  /update ID [--importance 1-3] [--category C]...   re-rate or re-file fact ID
  /move ID CATEGORY...   file fact ID under other categories
  /edit ID [--append] TEXT   correct fact ID (or add to it)
  /forget ID [REASON]    forget fact ID (and stop recalling the messages it came from)
  /unforget ID           undo a forget
  /dedupe [--threshold T] [--category C]... [--merge | --delete-older]   duplicate facts
  /stats                 what each memory tier holds
  /pin TEXT [--label L] | /unpin N | /unpin --all | /pins
  /schedules | /unschedule ID
  /erase ID... | /erase --matching TEXT [--yes]   erase messages (bus ids) and all derived from them
                         (also --turn ID, --sender CHANNEL:ID, --before DATE; lists until --yes)
  /status                queue, failures, delegated work, schedules, supervision, Dagster runs
  /help | /quit
Anything else is a message to the brain on the admin channel."""

SENDER = "owner"
CALLER = control.Caller("admin")


def _options(words: tuple[str, ...], valued: tuple[str, ...], switches: tuple[str, ...] = ()):
    """Split a command's words into the rest and its options: `--name VALUE` for the valued ones
    (repeatable, values in order), `--name` alone for switches. An unknown option is a ValueError."""
    rest, found = [], {}
    items = list(words)
    while items:
        word = items.pop(0)
        if word in valued and items:
            found.setdefault(word[2:], []).append(items.pop(0))
        elif word in switches:
            found[word[2:]] = True
        elif word.startswith("--"):
            raise ValueError(word)
        else:
            rest.append(word)
    return rest, found


class AdminChat:
    def __init__(
        self,
        settings: Settings,
        llm: LLMClient,
        inspect: Callable[[], dict] | None = None,
        wait_s: float = 300.0,
    ):
        self.settings, self.llm, self.inspect = settings, llm, inspect
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
        row = validate(envelope, self.settings, clock.now(), folder_channel=None, terminal=True)
        (bus_id,) = self.db.run(lambda con: enqueue_rows(con, [row], source="cortex chat").inserted)
        deadline = time.monotonic() + self.wait_s
        brain = Brain(self.db, self.settings, self.llm, inspect=self.inspect)
        while time.monotonic() < deadline:
            state, error = self.db.run(bus.state_of, bus_id)
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
        reply = self.db.run(reply_text, bus_id)
        return "(no reply)" if reply is None else reply

    # -- slash commands ----------------------------------------------------------------------

    def command(self, line: str) -> str:
        try:
            name, *args = shlex.split(line[1:])
        except ValueError as exc:
            return f"cannot parse that: {exc}"
        handler = {
            "help": lambda: HELP,
            "recall": self._recall,
            "recent": self._recent,
            "save": self._save,
            "update": self._update,
            "move": self._move,
            "edit": self._edit,
            "forget": self._forget,
            "unforget": self._unforget,
            "dedupe": self._dedupe,
            "stats": self._stats,
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
        except ControlError as exc:
            return str(exc)
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
            f"{h.channel or '?'}{f' · {DELEGATED_RESULT}' if h.delegated else ''} {h.at:%Y-%m-%d}, "
            f"messages {h.sources})"
            for n, h in enumerate(hits, 1)
        ]
        return "\n".join(lines) or "nothing found"

    def _recent(self, *words: str) -> str:
        query, options = _options(words, ("--category", "--limit"))
        items = control.recent(
            self.db,
            self.settings,
            " ".join(query),
            limit=int(options.get("limit", ["10"])[-1]),
            categories=options.get("category"),
        )
        return "\n".join(item.line(n) for n, item in enumerate(items, 1)) or "nothing in the last 48 h"

    def _save(self, *words: str) -> str:
        text, options = _options(words, ("--importance", "--category"))
        saved = control.save(
            self.db,
            self.settings,
            " ".join(text),
            CALLER,
            categories=options.get("category", ["fact"]),
            importance=float(options["importance"][-1]) if "importance" in options else None,
        )
        return saved.line()

    def _update(self, fact_id: str, *words: str) -> str:
        rest, options = _options(words, ("--importance", "--category"))
        if rest:
            raise ValueError(rest)
        fact = control.update(
            self.db,
            self.settings,
            int(fact_id),
            CALLER,
            importance=float(options["importance"][-1]) if "importance" in options else None,
            categories=options.get("category"),
        )
        return control.fact_line(fact)

    def _move(self, fact_id: str, *categories: str) -> str:
        return control.fact_line(control.move(self.db, self.settings, int(fact_id), categories, CALLER))

    def _edit(self, fact_id: str, *words: str) -> str:
        text, options = _options(words, (), ("--append",))
        mode = "append" if options.get("append") else "replace"
        return control.edit(self.db, self.settings, int(fact_id), " ".join(text), CALLER, mode=mode).line()

    def _forget(self, fact_id: str, *reason: str) -> str:
        return control.forget(self.db, self.settings, int(fact_id), CALLER, " ".join(reason)).line()

    def _unforget(self, fact_id: str, *reason: str) -> str:
        return control.unforget(self.db, self.settings, int(fact_id), CALLER, " ".join(reason)).line()

    def _dedupe(self, *words: str) -> str:
        rest, options = _options(words, ("--threshold", "--category"), ("--merge", "--delete-older"))
        if rest or (options.get("merge") and options.get("delete-older")):
            raise ValueError(rest)
        action = (
            "merge" if options.get("merge") else "delete_older" if options.get("delete-older") else "report"
        )
        found = control.dedupe(
            self.db,
            self.settings,
            CALLER,
            action=action,
            threshold=float(options["threshold"][-1]) if "threshold" in options else None,
            categories=options.get("category"),
        )
        return "\n".join(found.lines())

    def _stats(self) -> str:
        return "\n".join(control.stats_lines(control.stats(self.db, self.settings)))

    def _pin(self, *words: str) -> str:
        text, options = _options(words, ("--label",))
        return control.pin(self.db, self.settings, " ".join(text), options.get("label", [None])[-1]).line()

    def _unpin(self, position: str) -> str:
        if position == "--all":
            return f"unpinned {len(control.clear_pins(self.db, self.settings))} item(s)"
        return f"unpinned: {control.unpin(self.db, self.settings, int(position))['text']}"

    def _pins(self) -> str:
        return "\n".join(control.pin_line(p) for p in control.pins(self.db)) or "nothing pinned"

    def _schedules(self) -> str:
        jobs = [schedules.describe(j) for j in self.db.run(schedule_store.active_schedules)]
        lines = [
            f"{j['id']}: {j['description']} — next {j['next_fire']}, {schedules.when_listed(j)}" for j in jobs
        ]
        return "\n".join(lines) or "no schedules"

    def _unschedule(self, job_id: str) -> str:
        done = self.db.run(schedule_store.delete_schedule, job_id)
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
            result = eraser.erase(self.settings, chosen) if yes else eraser.preview(self.settings, chosen)
        except eraser.EraseError as exc:
            return str(exc)
        return "\n".join([*result.lines(), *(f"warning: {w}" for w in result.warnings)])

    def _status(self) -> str:
        overview = self.db.run(system_overview)
        if self.inspect is not None:
            overview["dagster"] = self.inspect()
        return json.dumps(overview, indent=2, default=str, ensure_ascii=False)
