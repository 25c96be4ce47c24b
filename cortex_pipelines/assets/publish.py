"""Published memory: threads, decisions, narrative, BOOTSTRAP.md and the memory bulletin.

Each file asset returns its markdown as a preview; files are rewritten only when their content
changes, so they stay byte-identical across idle runs.
"""

from datetime import timedelta
from functools import partial

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)

from cortex_pipelines.config import Settings
from cortex_pipelines.llm.base import LLMError
from cortex_pipelines.llm.recorded import complete_recorded
from cortex_pipelines.memory import store as memory_store
from cortex_pipelines.memory.extract import SKIP_CHANNELS
from cortex_pipelines.publish import boot, bulletin, narrative
from cortex_pipelines.publish.outputs import (
    FILES,
    Published,
    digest,
    find_secrets,
    publish,
    set_state,
    state,
)
from cortex_pipelines.publish.safe import one_line
from cortex_pipelines.publish.store import (
    add_decisions,
    load_decisions,
    load_threads,
    save_threads,
)
from cortex_pipelines.publish.tracking import (
    TurnIn,
    extract_decisions,
    strip_quotes,
    update_threads,
)
from cortex_pipelines.resources import CortexResource
from cortex_pipelines.storage import Database, utcnow
from cortex_pipelines.storage.session import inbound_after

_group = {"group_name": "publish"}
PREVIEW_CHARS = 12000


def _new_user_turns(db: Database, settings: Settings, cursor_name: str) -> tuple[list[TurnIn], int]:
    """The owner's new turns: threads and decisions in BOOTSTRAP.md are the user's, not a stranger's."""
    cursor = db.run(memory_store.get_cursor, cursor_name)
    rows = db.run(inbound_after, cursor)
    turns = [
        TurnIn(i, "user", ch, who, strip_quotes(text), ts)
        for i, ch, who, text, ts in rows
        if ch not in SKIP_CHANNELS and settings.is_owner(ch, who)
    ]
    return turns, (rows[-1][0] if rows else cursor)


def _file_result(context: AssetExecutionContext, result: Published, **extra) -> MaterializeResult:
    if result.warning:
        context.log.warning(result.warning)
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(result.path)),
            "changed": result.changed,
            "chars": result.chars,
            "words": result.words,
            **({"warning": one_line(result.warning, 500)} if result.warning else {}),
            **extra,
            "preview": MetadataValue.md(result.content[:PREVIEW_CHARS] or "_not written yet_"),
        }
    )


@asset(
    deps=["session_messages"],
    kinds={"duckdb"},
    description=(
        "Conversation threads (seed 003): detected, matched, closed, pruned after 7 days, capped at 50."
    ),
    **_group,
)
def threads(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, settings = cortex.database(), cortex.settings()
    turns, upto = _new_user_turns(db, settings, "threads_tracked")
    current = db.run(load_threads)
    if turns:
        current = update_threads(
            current,
            turns,
            utcnow(),
            prune_days=int(settings.thread_prune_days),
            max_threads=settings.max_threads,
        )

    def save(con):
        if turns:
            save_threads(con, current)
        memory_store.set_cursor(con, "threads_tracked", upto)

    db.run(save)
    open_ = [t for t in current if t.status == "open"]
    table = "\n".join(
        ["| status | priority | thread | mood |", "|---|---|---|---|"]
        + [f"| {t.status} | {t.priority} | {one_line(t.title, 120)} | {t.mood} |" for t in current[:50]]
    )
    return MaterializeResult(
        metadata={
            "turns_read": len(turns),
            "open": len(open_),
            "closed": len(current) - len(open_),
            "preview": MetadataValue.md(table),
        }
    )


@asset(
    deps=["session_messages"],
    kinds={"duckdb"},
    description=(
        "Decisions said in conversation (EN/DE patterns), with inferred impact and a 24 h dedupe window."
    ),
    **_group,
)
def decisions(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, settings = cortex.database(), cortex.settings()
    turns, upto = _new_user_turns(db, settings, "decisions_tracked")
    found = []
    if turns:
        window = timedelta(hours=settings.decision_dedupe_hours)
        existing = db.run(load_decisions, turns[0].ts - window)
        found = extract_decisions(turns, existing, dedupe_hours=int(settings.decision_dedupe_hours))

    def save(con):
        add_decisions(con, found)
        memory_store.set_cursor(con, "decisions_tracked", upto)

    db.run(save)
    table = "\n".join(
        ["| when | impact | what |", "|---|---|---|"]
        + [f"| {d.decided_at:%Y-%m-%d %H:%M} | {d.impact} | {one_line(d.what, 120)} |" for d in found]
    )
    return MaterializeResult(
        metadata={
            "turns_read": len(turns),
            "new_decisions": len(found),
            "preview": MetadataValue.md(table if found else "_none new_"),
        }
    )


@asset(
    name="narrative",
    deps=["threads", "decisions", "harvested_ops"],
    kinds={"markdown"},
    description=(
        "out/narrative.md: the last 24 h of activity — threads, decisions, delegated work, timeline."
    ),
    **_group,
)
def narrative_file(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, settings = cortex.database(), cortex.settings()
    anchor = narrative.latest_activity(db)
    if anchor is None:
        return MaterializeResult(metadata={"skipped": "no conversation yet"})
    data = narrative.inputs(db, settings, anchor)
    result = publish(db, settings, "narrative", lambda: narrative.render(data))
    return _file_result(context, result, decisions=len(data["decisions"]), timeline=len(data["timeline"]))


@asset(
    deps=["extracted_facts", "memory_maintenance", "cold_memory", "harvested_ops"],
    kinds={"markdown", "anthropic"},
    description=("out/memory_bulletin.md: identity, events, goals, decisions, preferences in ~500 words."),
    **_group,
)
def memory_bulletin(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, settings = cortex.database(), cortex.settings()
    rows = bulletin.memory_rows(db)
    typed = bulletin.render_typed(rows, settings.bulletin_words)
    llm = cortex.memory_llm()
    key = digest([typed, settings.llm_provider, settings.extraction_model, settings.bulletin_words])
    before = state(db, "memory_bulletin")
    if before is None or before["state"] == "cold":
        set_state(db, "memory_bulletin", "warming")
    tokens = {"llm_calls": 0, "input_tokens": 0, "output_tokens": 0}

    def render() -> str:
        if llm is None:
            return typed
        if not bulletin.within_budget(db, settings, typed):
            context.log.warning("daily bulletin token budget reached: publishing the typed render")
            return typed
        complete = partial(complete_recorded, db, llm, asset="memory_bulletin")
        text, response = bulletin.synthesize(complete, typed, settings)
        tokens.update(llm_calls=1, input_tokens=response.input_tokens, output_tokens=response.output_tokens)
        return text

    try:
        result = publish(db, settings, "memory_bulletin", render, input_key=key)
    except LLMError as exc:
        path = settings.paths.out / FILES["memory_bulletin"]
        result = Published(
            "memory_bulletin",
            path,
            path.read_text() if path.is_file() else "",
            False,
            warning=f"bulletin generation failed, the previous bulletin stays: {exc}",
        )
    if result.warning:  # generation or writing failed: the previous bulletin (if any) stays
        set_state(db, "memory_bulletin", "degraded", result.warning)
    warmup = state(db, "memory_bulletin")["state"]
    return _file_result(context, result, memories=len(rows), warmup=warmup, **tokens)


@asset(
    deps=["narrative", "threads", "decisions", "channel_summaries", "memory_bulletin"],
    kinds={"markdown"},
    description=(
        "out/BOOTSTRAP.md: state, warnings, hot snapshot, narrative, top threads, decisions, pins, "
        "within 16000 characters."
    ),
    **_group,
)
def boot_context(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, settings = cortex.database(), cortex.settings()
    data = boot.inputs(db, settings)
    result = publish(
        db,
        settings,
        "boot_context",
        lambda: boot.render(data, settings.boot_max_chars, settings.boot_threads),
    )
    return _file_result(context, result, budget=settings.boot_max_chars)


@asset_check(asset=boot_context, description="BOOTSTRAP.md stays within its character budget.")
def boot_within_budget(cortex: CortexResource) -> AssetCheckResult:
    settings = cortex.settings()
    path = settings.paths.out / FILES["boot_context"]
    chars = len(path.read_text()) if path.is_file() else 0
    return AssetCheckResult(
        passed=chars <= settings.boot_max_chars, metadata={"chars": chars, "budget": settings.boot_max_chars}
    )


@asset_check(
    asset=memory_bulletin,
    description="The bulletin was confirmed current within its refresh interval (plus 15 minutes of slack).",
)
def bulletin_fresh(cortex: CortexResource) -> AssetCheckResult:
    settings = cortex.settings()
    row = state(cortex.database(), "memory_bulletin")
    limit = timedelta(minutes=settings.bulletin_refresh_minutes + 15)
    age = utcnow() - row["verified_at"] if row and row["verified_at"] else None
    passed = age is not None and age <= limit and row["state"] == "warm"
    return AssetCheckResult(
        passed=passed,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "state": row["state"] if row else "cold",
            "age_minutes": round(age.total_seconds() / 60, 1) if age else -1.0,
        },
    )


def _no_secrets_check(asset_def, name: str):
    @asset_check(
        asset=asset_def,
        name=f"{name}_has_no_secrets",
        description=f"{FILES[name]} carries no API key or secret-like string.",
    )
    def check(cortex: CortexResource) -> AssetCheckResult:
        settings = cortex.settings()
        path = settings.paths.out / FILES[name]
        found = find_secrets(path.read_text(), settings) if path.is_file() else []
        return AssetCheckResult(passed=not found, metadata={"findings": len(found)})

    return check


PUBLISH_ASSETS = [threads, decisions, narrative_file, memory_bulletin, boot_context]
PUBLISH_CHECKS = [
    boot_within_budget,
    bulletin_fresh,
    _no_secrets_check(narrative_file, "narrative"),
    _no_secrets_check(memory_bulletin, "memory_bulletin"),
    _no_secrets_check(boot_context, "boot_context"),
]
