"""Published memory: threads, decisions, narrative, BOOTSTRAP.md and the memory bulletin.

Each file asset returns its markdown as a preview; files are rewritten only when their content
changes, so they stay byte-identical across idle runs. A file that could not be written shows
`written: false` and turns its `<name>_written` check red, with the reason.
"""

from pathlib import Path

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)

from cortex_pipelines.config import Paths
from cortex_pipelines.publish import boot, bulletin, conversation, narrative
from cortex_pipelines.publish.outputs import Published, find_secrets
from cortex_pipelines.publish.safe import one_line
from cortex_pipelines.resources import CortexResource

_group = {"group_name": "publish"}
PREVIEW_CHARS = 12000
FILE_NAMES = {name: path.name for name, path in Paths(Path()).published.items()}  # for descriptions


def _written_check(name: str) -> AssetCheckSpec:
    return AssetCheckSpec(
        f"{name}_written",
        asset=name,
        description=f"{FILE_NAMES[name]} holds this run's version (red, with the reason, if not written).",
    )


def _file_result(context: AssetExecutionContext, result: Published) -> MaterializeResult:
    error = {"error": one_line(result.error, 500)} if result.error else {}
    if result.error:
        context.log.error(result.error)
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(result.path)),
            "written": result.written,
            "changed": result.changed,
            "chars": result.chars,
            "words": result.words,
            **error,
            **result.details,
            "preview": MetadataValue.md(result.content[:PREVIEW_CHARS] or "_not written yet_"),
        },
        check_results=[
            AssetCheckResult(
                check_name=f"{result.name}_written",
                passed=result.written,
                severity=AssetCheckSeverity.ERROR,
                metadata={"path": MetadataValue.path(str(result.path)), **error},
            )
        ],
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
    update = conversation.track_threads(cortex.database(), cortex.settings())
    open_ = [t for t in update.threads if t.status == "open"]
    table = "\n".join(
        ["| status | priority | thread | mood |", "|---|---|---|---|"]
        + [
            f"| {t.status} | {t.priority} | {one_line(t.title, 120)} | {t.mood} |"
            for t in update.threads[:50]
        ]
    )
    return MaterializeResult(
        metadata={
            "turns_read": update.turns_read,
            "open": len(open_),
            "closed": len(update.threads) - len(open_),
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
    found = (update := conversation.track_decisions(cortex.database(), cortex.settings())).found
    table = "\n".join(
        ["| when | impact | what |", "|---|---|---|"]
        + [f"| {d.decided_at:%Y-%m-%d %H:%M} | {d.impact} | {one_line(d.what, 120)} |" for d in found]
    )
    return MaterializeResult(
        metadata={
            "turns_read": update.turns_read,
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
    check_specs=[_written_check("narrative")],
    **_group,
)
def narrative_file(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    result = narrative.write_narrative(cortex.database(), cortex.settings())
    if result is None:
        return MaterializeResult(
            metadata={"skipped": "no conversation yet"},
            check_results=[
                AssetCheckResult(
                    check_name="narrative_written", passed=True, metadata={"skipped": "no conversation yet"}
                )
            ],
        )
    return _file_result(context, result)


@asset(
    deps=["extracted_facts", "memory_maintenance", "cold_memory", "harvested_ops"],
    kinds={"markdown", "anthropic"},
    description=("out/memory_bulletin.md: identity, events, goals, decisions, preferences in ~500 words."),
    check_specs=[_written_check("memory_bulletin")],
    **_group,
)
def memory_bulletin(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    result = bulletin.refresh(cortex.database(), cortex.settings(), cortex.memory_llm(), context.log.warning)
    return _file_result(context, result)


@asset(
    deps=["narrative", "threads", "decisions", "channel_summaries", "memory_bulletin"],
    kinds={"markdown"},
    description=(
        "out/BOOTSTRAP.md: state, warnings, hot snapshot, narrative, top threads, decisions, pins, "
        "within 16000 characters."
    ),
    check_specs=[_written_check("boot_context")],
    **_group,
)
def boot_context(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    return _file_result(context, boot.write_boot_context(cortex.database(), cortex.settings()))


@asset_check(asset=boot_context, description="BOOTSTRAP.md stays within its character budget.")
def boot_within_budget(cortex: CortexResource) -> AssetCheckResult:
    settings = cortex.settings()
    path = settings.paths.bootstrap
    chars = len(path.read_text()) if path.is_file() else 0
    return AssetCheckResult(
        passed=chars <= settings.boot_max_chars, metadata={"chars": chars, "budget": settings.boot_max_chars}
    )


@asset_check(
    asset=memory_bulletin,
    description="The bulletin was confirmed current within its refresh interval (plus 15 minutes of slack).",
)
def bulletin_fresh(cortex: CortexResource) -> AssetCheckResult:
    fresh = bulletin.freshness(cortex.database(), cortex.settings())
    return AssetCheckResult(
        passed=fresh.current,
        severity=AssetCheckSeverity.WARN,
        metadata={"state": fresh.state, "age_minutes": fresh.age_minutes},
    )


def _no_secrets_check(asset_def, name: str):
    @asset_check(
        asset=asset_def,
        name=f"{name}_has_no_secrets",
        description=f"{FILE_NAMES[name]} carries no API key or secret-like string.",
    )
    def check(cortex: CortexResource) -> AssetCheckResult:
        settings = cortex.settings()
        path = settings.paths.published[name]
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
