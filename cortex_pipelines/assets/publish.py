"""Published memory: threads, decisions, narrative, BOOTSTRAP.md and the memory bulletin.

Each file asset returns its markdown as a preview; files are rewritten only when their content
changes, so they stay byte-identical across idle runs. A file that could not be written shows
`written: false` and turns its `<name>_written` check red, with the reason. Each says when it runs
(cortex_pipelines/automation.py); bump an asset's code_version when its logic changes what it
produces.
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
)

from cortex_pipelines.assets.checks import Check, checks_in_one_step
from cortex_pipelines.automation import DAILY, HOURLY, WITHIN_3_TO_7_DAYS, after_input, on_new_input
from cortex_pipelines.config import Paths
from cortex_pipelines.llm import cost
from cortex_pipelines.publish import boot, bulletin, conversation, narrative
from cortex_pipelines.publish.outputs import Published, find_secrets
from cortex_pipelines.publish.safe import one_line
from cortex_pipelines.resources import DatabaseResource, LLMResource, SettingsResource

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
                severity=AssetCheckSeverity.WARN if result.render_failed else AssetCheckSeverity.ERROR,
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
    # Pruning happens as new turns are folded in, so only new turns matter.
    automation_condition=on_new_input(HOURLY),
    code_version="1",
    **_group,
)
def threads(
    context: AssetExecutionContext, settings: SettingsResource, database: DatabaseResource
) -> MaterializeResult:
    update = conversation.track_threads(database.get(), settings.get())
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
    automation_condition=on_new_input(HOURLY),
    code_version="1",
    **_group,
)
def decisions(
    context: AssetExecutionContext, settings: SettingsResource, database: DatabaseResource
) -> MaterializeResult:
    found = (update := conversation.track_decisions(database.get(), settings.get())).found
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
    # Its 24 hours end at the last user activity, not now: only new input changes it.
    automation_condition=on_new_input(HOURLY),
    code_version="1",
    **_group,
)
def narrative_file(
    context: AssetExecutionContext, settings: SettingsResource, database: DatabaseResource
) -> MaterializeResult:
    result = narrative.write_narrative(database.get(), settings.get())
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
    # LLM-backed: only when memory changed (and then only if the typed render did).
    automation_condition=on_new_input(HOURLY),
    code_version="1",
    **_group,
)
def memory_bulletin(
    context: AssetExecutionContext, settings: SettingsResource, database: DatabaseResource, llm: LLMResource
) -> MaterializeResult:
    db, config = database.get(), settings.get()
    meter = cost.Meter.start(db, config, "bulletin")  # the bulletin checks its own budget
    result = bulletin.refresh(db, config, llm.memory_client(), context.log.warning)
    result.details.update(meter.metadata())
    return _file_result(context, result)


@asset(
    deps=["narrative", "threads", "decisions", "channel_summaries", "memory_bulletin"],
    kinds={"markdown"},
    description=(
        "out/BOOTSTRAP.md: state, warnings, hot snapshot, narrative, top threads, decisions, pins, "
        "within 16000 characters."
    ),
    check_specs=[_written_check("boot_context")],
    # Hourly when an input changed. It also warns after two days without activity, which no input
    # announces: a daily refresh (in the maintenance run) for three to seven days after its inputs
    # last changed writes that line. The file is rewritten only when a line changed. No LLM.
    automation_condition=on_new_input(HOURLY) | after_input(DAILY, WITHIN_3_TO_7_DAYS),
    code_version="1",
    **_group,
)
def boot_context(
    context: AssetExecutionContext, settings: SettingsResource, database: DatabaseResource
) -> MaterializeResult:
    return _file_result(context, boot.write_boot_context(database.get(), settings.get()))


def boot_within_budget(resources) -> AssetCheckResult:
    config = resources.settings.get()
    chars = len(config.paths.bootstrap.read_text()) if config.paths.bootstrap.is_file() else 0
    return AssetCheckResult(
        passed=chars <= config.boot_max_chars, metadata={"chars": chars, "budget": config.boot_max_chars}
    )


def bulletin_fresh(resources) -> AssetCheckResult:
    fresh = bulletin.freshness(resources.database.get(), resources.settings.get())
    return AssetCheckResult(
        passed=fresh.current,
        severity=AssetCheckSeverity.WARN,
        metadata={"state": fresh.state, "age_minutes": fresh.age_minutes},
    )


def _no_secrets(name: str) -> Check:
    def evaluate(resources) -> AssetCheckResult:
        config = resources.settings.get()
        path = config.paths.published[name]
        found = find_secrets(path.read_text(), config) if path.is_file() else []
        return AssetCheckResult(passed=not found, metadata={"findings": len(found)})

    return Check(
        f"{name}_has_no_secrets",
        name,
        f"{FILE_NAMES[name]} carries no API key or secret-like string.",
        evaluate,
    )


PUBLISH_ASSETS = [threads, decisions, narrative_file, memory_bulletin, boot_context]
PUBLISH_CHECKS = [
    checks_in_one_step(
        "published_file_checks",
        "What the published files hold: BOOTSTRAP.md's budget, the bulletin's freshness, no secrets.",
        [
            Check(
                "boot_within_budget",
                "boot_context",
                "BOOTSTRAP.md stays within its character budget.",
                boot_within_budget,
            ),
            Check(
                "bulletin_fresh",
                "memory_bulletin",
                "The bulletin was confirmed current within its refresh interval (plus 15 minutes of slack).",
                bulletin_fresh,
            ),
            _no_secrets("narrative"),
            _no_secrets("memory_bulletin"),
            _no_secrets("boot_context"),
        ],
    )
]
