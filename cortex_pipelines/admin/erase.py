"""Erasure: messages, and everything derived from them, out of every store (`cortex erase`, `/erase`).

`forget` is soft and reversible; erasure is for text that must not stay anywhere. In order:
1. DuckDB, in one transaction: the exchanges (message, turn, reply), their vectors, facts drawn only
   from them or whose text holds erased text (a fact with other sources that does not keeps those,
   and its text), fact history, threads, decisions,
   channel summaries, delegated work, schedules, pins, outbox rows; and an audit row (ids and
   counts: never the content, nor a hash of it).
2. LanceDB: their rows, with every other row of the data files that held one rewritten and every
   older version removed; the saved recall snapshots (the next query rebuilds them).
3. Files: inbox archives (a .jsonl loses the lines, a .json goes), outbox files, the published
   files (rebuilt from what is left), Dagster's run storage (each line carrying the text replaced,
   SQLite vacuumed).
4. DuckDB's file itself: rewritten into a fresh file (DELETE leaves bytes in free blocks); every
   backup and set-aside copy still holds the rows, so they are deleted and one fresh backup taken.

The brain lease is held throughout, so no message is answered meanwhile, and nothing starts while a
Dagster run is in flight (it could write a preview of the text after its storage was cleaned).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cortex_pipelines import clock
from cortex_pipelines.admin.redaction import MIN_CHARS, Redactor
from cortex_pipelines.config import CHANNEL_PATTERN, Settings
from cortex_pipelines.files import write_atomic
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, vector_store
from cortex_pipelines.publish import boot, bulletin, narrative
from cortex_pipelines.publish.outputs import publish
from cortex_pipelines.storage import Database, dagster_sqlite, erasure, lease, session
from cortex_pipelines.storage.backup import BackupError, discard_copies
from cortex_pipelines.storage.erasure import Selector
from cortex_pipelines.storage.published import bulletin_facts, latest_user_activity
from cortex_pipelines.text import shorten

SHOWN_CHARS = 72


class EraseError(Exception):
    """Bad input: nothing was changed; the message is one line."""


class Busy(EraseError):
    """The brain lease, a Dagster run or the database file is taken: try again later."""


@dataclass
class Erasure:
    """What an erasure touched (or, not applied, would touch): the messages and facts, as listed to
    the user, and counts per store. `scrubs`: a --matching text, which goes from the other stores
    (Dagster's storage, backups) even where no message or fact holds it any more."""

    messages: list[dict]
    facts: list[dict] = field(default_factory=list)
    pins: list[dict] = field(default_factory=list)
    scrubs: bool = False
    applied: bool = False
    erasure_id: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The erasure as the CLI and the admin chat say it: a line per message, then the outcome."""
        said = []
        for m in self.messages:
            ref = f"turn {m['turn']}" if m["id"] is None else f"#{m['id']}"
            if m["id"] is not None and m["turn"] is not None:
                ref += f" (turn {m['turn']})"
            pulled = "  (its reply quotes erased text)" if m["pulled_in"] else ""
            said.append(f"{ref} {m['channel']} {m['sender'] or '?'} {m['sent_at'][:16]}: {m['text']}{pulled}")
        said += [f"fact {f['id']}: {f['text']}" for f in self.facts]
        said += [f"pin {p['position']}: {p['text']}" for p in self.pins]
        counted = ((self.messages, "message"), (self.facts, "fact"), (self.pins, "pin"))
        what = " and ".join(f"{len(listed)} {kind}(s)" for listed, kind in counted if listed)
        counts = ", ".join(f"{k} {v}" for k, v in self.counts.items() if v)
        if self.messages or self.facts or self.pins:
            if self.applied:
                said.append(f"erased {what} as erasure #{self.erasure_id}: {counts}")
            else:
                said.append(f"nothing erased; add --yes to erase these {what}")
        elif not self.scrubs:
            said.append("no message matches; nothing erased")
        elif not self.applied:
            said.append(
                "no message or fact holds it; add --yes to remove the text from Dagster's run storage, "
                "the backups and the database file's free blocks all the same"
            )
        else:
            said.append(
                f"no message or fact held it; erasure #{self.erasure_id} removed it from the other stores: "
                f"{counts or 'none held it'}"
            )
        return said

    def as_dict(self) -> dict:
        return {
            "erased": self.applied,
            "erasure_id": self.erasure_id,
            "messages": self.messages,
            "facts": self.facts,
            "pins": self.pins,
            "counts": self.counts,
            "warnings": self.warnings,
        }


def selector(
    message_ids: list[int] | None = None,
    turn_ids: list[int] | None = None,
    matching: str | None = None,
    sender: str | None = None,
    before: str | None = None,
) -> Selector:
    """The selector the user's options describe; EraseError (one line) when they describe none or
    are malformed."""
    ids = bool(message_ids or turn_ids)
    filters = matching is not None or sender is not None or before is not None
    if not ids and not filters:
        raise EraseError(
            "say what to erase: --message ID, --turn ID, --matching TEXT, --sender CHANNEL:ID, "
            "--before DATE or --expired"
        )
    if ids and filters:
        raise EraseError("give message ids or filters (--matching, --sender, --before), not both")
    if matching is not None and not matching.strip():
        raise EraseError("--matching needs some text")
    who = None
    if sender is not None:
        channel, sep, sender_id = sender.partition(":")
        if not sep or not sender_id or not re.match(CHANNEL_PATTERN, channel):
            raise EraseError(f"--sender {sender!r} is not CHANNEL:SENDER_ID")
        who = (channel, sender_id)
    return Selector(
        tuple(message_ids or ()),
        tuple(turn_ids or ()),
        matching.strip() if matching is not None else None,
        who,
        _date(before) if before is not None else None,
    )


def _date(text: str) -> datetime:
    """An ISO date or time; a naive one is UTC. As naive UTC, as the database keeps times."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise EraseError(f"--before {text!r} is not an ISO date (2026-11-01 or 2026-11-01T12:00)") from None
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def preview(settings: Settings, sel: Selector) -> Erasure:
    """What erasing would remove, changing nothing: every message that goes, those pulled in (a
    reply quoting an erased message) included, and every fact."""
    db = Database(settings.paths.db)
    chosen, plan = _plan(db, sel)
    if plan is None:
        return Erasure([])
    return Erasure(_listing(db, plan, chosen), _facts(db, plan), _pins(db, plan), bool(sel.matching))


def erase(settings: Settings, sel: Selector) -> Erasure:
    """Erase what the selector names from every store. EraseError, with nothing changed, for an
    unknown id or a busy instance."""
    db = Database(settings.paths.db)
    chosen, plan = _plan(db, sel)
    if plan is None:
        return Erasure([])
    return _apply(
        settings,
        db,
        _listing(db, plan, chosen),
        lambda con: erasure.plan(con, plan.bus_ids, _notes(chosen), sel.matching),
        lambda again: _listing(db, again, chosen),
        sel.kinds(),
        sel.matching,
    )


def expire(settings: Settings, apply: bool = True) -> Erasure:
    """Turn retention (`CORTEX_TURN_TTL_DAYS`, seed 001's turn TTL; off by default): the verbatim
    messages and turns older than the TTL leave every store as an erasure's do, while the facts,
    summaries, threads and update links learnt from them stay, citing them by id. With `apply`
    false, only lists them."""
    if not settings.turn_ttl_days:
        return Erasure([])
    db = Database(settings.paths.db)
    cutoff = (clock.now() - timedelta(days=settings.turn_ttl_days)).astimezone(UTC).replace(tzinfo=None)
    plan = db.run(erasure.expiry_plan, cutoff)
    if not plan.session_ids and not plan.bus_ids:
        return Erasure([])
    listing = _listing(db, plan, [])
    for message in listing:
        message["pulled_in"] = False  # each is named by its age
    if not apply:
        return Erasure(listing)
    return _apply(
        settings, db, listing, lambda con: erasure.expiry_plan(con, cutoff), lambda _: listing, "expired"
    )


def _apply(
    settings: Settings,
    db: Database,
    listing: list[dict],
    replan: Callable[[object], erasure.Plan],
    relist: Callable[[erasure.Plan], list[dict]],
    kinds: str,
    needle: str | None = None,
) -> Erasure:
    """Erase a plan: planned again under the brain lease (a message may have come meanwhile), then
    DuckDB in one transaction, every other store, and DuckDB's file rewritten."""
    runs = dagster_sqlite.live_runs(settings.paths.dagster_home)
    if runs:
        raise Busy(
            f"Dagster run(s) {', '.join(r[:8] for r in runs)} in progress: wait for them to finish (a "
            f"processing run lingers {settings.brain_linger_seconds:g} s after its last answer) or stop "
            "`cortex dev`, then run the command again; nothing was erased"
        )
    try:
        db.run(lease.acquire, "erase", settings.lease_timeout_s)
    except lease.BrainBusy as exc:
        raise Busy(f"{exc}: try again when it is done; nothing was erased") from None
    try:
        plan = db.run(replan)
        listed = relist(plan) or listing
        result = Erasure(listed, _facts(db, plan), _pins(db, plan), bool(needle), applied=True)
        result.erasure_id = db.run(erasure.delete, plan, kinds)
        redactor = Redactor([*plan.texts, *plan.derived, needle or ""], plan.session_ids)
        for step in (_vectors, _inbox, _outbox, _published, _dagster):
            try:
                result.counts |= step(settings, db, plan, redactor)
            except Exception as exc:  # the other stores are still cleaned; said at the end
                result.warnings.append(f"{step.__name__.strip('_')}: {exc}")
        if needle and (left := still_holding(settings.paths.dagster_home, needle)):
            result.warnings.append(
                f"dagster: {len(left)} file(s) still hold the --matching text, whose lines are found "
                f"there only from {MIN_CHARS} characters on: erase again with a longer text"
            )
        result.counts = plan.counts | result.counts
        result.counts |= _seal(settings, db, result)
    finally:
        db.run(lease.release)
    return result


def finish(settings: Settings) -> list[int]:
    """Complete erasures whose database file could not be rewritten (another process kept it busy):
    rewrite it now, replace the backups. Returns their ids."""
    db = Database(settings.paths.db)
    pending = db.run(erasure.unfinished)
    if pending:
        result = Erasure([], applied=True, erasure_id=pending[-1]["id"])
        result.counts = json.loads(pending[-1]["counts"])
        _seal(settings, db, result)
        if result.warnings:
            raise Busy(result.warnings[0])
    return [p["id"] for p in pending]


def _notes(chosen: list[dict]) -> list[int]:
    return [m["turn"] for m in chosen if m["id"] is None]


def _plan(db: Database, sel: Selector) -> tuple[list[dict], erasure.Plan | None]:
    """The messages the selector names and the plan to erase them; with --matching, a plan even
    when no message holds the text: facts may, and copies in the other stores."""
    unknown = db.run(erasure.unknown_ids, list(sel.bus_ids), list(sel.session_ids))
    if unknown:
        raise EraseError(f"no {', '.join(unknown)}; nothing was erased")
    chosen = db.run(erasure.matching, sel)
    if not chosen and not sel.matching:
        return [], None
    bus_ids = [m["id"] for m in chosen if m["id"] is not None]
    return chosen, db.run(erasure.plan, bus_ids, _notes(chosen), sel.matching)


def _listing(db: Database, plan: erasure.Plan, chosen: list[dict]) -> list[dict]:
    """The plan's messages as the user sees them: id, channel, sender, shortened text, time, and
    whether it was pulled in rather than named."""
    if not plan.bus_ids and not _notes(chosen):
        return []  # an empty selector would name every message
    named = {(m["id"], m["turn"]) for m in chosen}
    every = db.run(erasure.matching, Selector(tuple(plan.bus_ids), tuple(_notes(chosen))))
    return [
        {
            "id": m["id"],
            "turn": m["turn"],
            "channel": m["channel"],
            "sender": m["sender"],
            "text": shorten(m["text"], SHOWN_CHARS),
            "sent_at": m["said_at"].isoformat() + "Z",
            "pulled_in": (m["id"], m["turn"]) not in named,
        }
        for m in every
    ]


def _facts(db: Database, plan: erasure.Plan) -> list[dict]:
    listed = db.run(erasure.listed_facts, plan.facts)
    return [{"id": f["id"], "text": shorten(f["text"], SHOWN_CHARS)} for f in listed]


def _pins(db: Database, plan: erasure.Plan) -> list[dict]:
    """The pins that go: they hold the --matching text or quote an erased message."""
    return [
        {"position": p["position"], "text": shorten(p["text"], SHOWN_CHARS)}
        for p in db.run(erasure.listed_pins, plan.ids.get("pins", []))
    ]


def _vectors(settings: Settings, db: Database, plan: erasure.Plan, redactor: Redactor) -> dict[str, int]:
    """LanceDB rows of the erased turns and facts; a turn paired with an erased one in its search
    text is paired again with the turn before it that remains, a trimmed fact keeps its other sources."""
    from cortex_pipelines.memory.pipeline import episode_search_text

    vectors = vector_store(settings.paths.lance)
    neighbours = set()
    if plan.session_ids:
        prev = f"prev_id IN ({', '.join(map(str, plan.session_ids))})"
        neighbours = vectors.ids(EPISODIC, prev) - set(plan.session_ids)
    paired = {
        row[0]: {"search_text": episode_search_text(row[3], row[4], row[6], row[7]), "prev_id": row[8]}
        for row in db.run(session.episodes_of, sorted(neighbours))
    }
    trimmed = {fid: {"sources": sources} for fid, sources in db.run(erasure.fact_sources, plan.trimmed)}
    return {
        "lancedb_episodic": vectors.erase(EPISODIC, plan.session_ids, paired),
        "lancedb_semantic": vectors.erase(SEMANTIC, plan.facts, trimmed),
    }


def _inbox(settings: Settings, db: Database, plan: erasure.Plan, redactor: Redactor) -> dict[str, int]:
    """Inbox files holding an erased message, archived, waiting or rejected: a .jsonl is rewritten
    without its lines; any other file (a .json, a rejected .txt or .part, and a rejected file's note)
    is deleted. A record goes when its channel and external id, or its whole text, are an erased
    message's, or any of its strings (the text under whatever key a connector wrote it) carries
    erased text or holds the --matching text; a line that is not a record, when it does."""
    keys = {(c, str(e)) for c, e in plan.external_ids}
    texts = {unicodedata.normalize("NFC", t) for t in plan.texts}
    needle = plan.needle.lower() if plan.needle else None

    def carries(text: str) -> bool:
        return redactor.hits(text) or bool(needle and needle in unicodedata.normalize("NFC", text).lower())

    def erased(line: str) -> bool:
        try:
            record = json.loads(line)
        except ValueError:
            return carries(line)
        if not isinstance(record, dict):
            return any(carries(text) for text in _strings(record)) or carries(line)
        text = record.get("text")
        said = unicodedata.normalize("NFC", text) if isinstance(text, str) else ""
        return (
            (record.get("channel"), str(record.get("external_id"))) in keys
            or said in texts
            or any(carries(text) for text in _strings(record))
        )

    changed = 0
    for path in sorted(settings.paths.inbox.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_text(encoding="utf-8", errors="replace")
        lines = data.split("\n") if path.suffix == ".jsonl" else [data]
        kept = [line for line in lines if not (line.strip() and erased(line))]
        if kept == lines:
            continue
        changed += 1
        if any(line.strip() for line in kept):
            write_atomic(path, "\n".join(kept))
        else:
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".error").unlink(missing_ok=True)
    return {"inbox_files": changed}


def _strings(value: object) -> list[str]:
    """Every string in a parsed JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _outbox(settings: Settings, db: Database, plan: erasure.Plan, redactor: Redactor) -> dict[str, int]:
    gone = 0
    for outbox_id, channel in plan.outbox:
        path = settings.paths.outbox / channel / f"{outbox_id:010d}.json"
        if path.is_file():
            path.unlink()
            gone += 1
    return {"outbox_files": gone}


def _published(settings: Settings, db: Database, plan: erasure.Plan, redactor: Redactor) -> dict[str, int]:
    """The published files rebuilt from what is left, with no LLM call (with anthropic, the bulletin
    stays typed until its next run synthesizes it again); the hot snapshot loses its erased lines."""
    changed = 0
    snapshot = settings.paths.hot_snapshot
    if snapshot.is_file():
        text, dropped = redactor.drop(snapshot.read_text(encoding="utf-8"))
        if dropped:
            write_atomic(snapshot, text)
            changed += 1
    renders = {
        "narrative": lambda: narrative.render(narrative.inputs(db, settings)),
        "memory_bulletin": lambda: bulletin.render_typed(db.run(bulletin_facts), settings.bulletin_words),
        "boot_context": lambda: boot.render(
            boot.inputs(db, settings), settings.boot_max_chars, settings.boot_threads
        ),
    }
    for name, render in renders.items():  # in this order: BOOTSTRAP.md embeds the narrative
        path = settings.paths.published[name]
        if not path.is_file():
            continue
        if name == "narrative" and db.run(latest_user_activity) is None:
            path.unlink()  # nothing left to narrate
            changed += 1
            continue
        result = publish(db, settings, name, render)
        if result.error:
            raise OSError(result.error)
        changed += result.changed
    return {"published_files": changed}


def _dagster(settings: Settings, db: Database, plan: erasure.Plan, redactor: Redactor) -> dict[str, int]:
    home = settings.paths.dagster_home
    if where := dagster_sqlite.elsewhere(home):
        raise OSError(f"Dagster keeps its storage elsewhere ({where}): erase the text there yourself")
    return dagster_sqlite.clean(home, redactor)


def still_holding(home: Path, needle: str) -> list[Path]:
    """Files under Dagster's home whose bytes still hold the needle (any case) as a word of its
    own: a needle too short for the redactor is only found inside a longer erased text, and the
    user must hear it stayed; but "4417" inside a timestamp (1795874417.2) is not their PIN."""
    edge = rb"(?<![0-9a-z])" if needle[:1].isalnum() else b""
    end = rb"(?![0-9a-z])" if needle[-1:].isalnum() else b""
    wanted = re.compile(edge + re.escape(needle.lower().encode()) + end)
    if not home.is_dir():
        return []
    files = (p for p in sorted(home.rglob("*")) if p.is_file() and not p.is_symlink())
    return [p for p in files if wanted.search(p.read_bytes().lower())]


def _seal(settings: Settings, db: Database, result: Erasure) -> dict[str, int]:
    """Rewrite DuckDB's file, replace the backups that still hold the rows, mark erasures finished.
    A file kept busy leaves the erasure unfinished: `cortex erase --finish` completes it."""
    try:
        db.rewrite()
    except BackupError as exc:
        result.warnings.append(f"database file: {exc}")
        return {}
    counts = {"backups_deleted": discard_copies(settings.paths.db)}
    try:
        db.back_up()
    except (OSError, BackupError) as exc:
        result.warnings.append(f"a fresh backup could not be taken: {exc}")
    db.run(erasure.finish, result.erasure_id, result.counts | counts)
    return counts
