"""Memory assets: thin Dagster definitions over cortex_pipelines.memory.

All of them share the `cortex_memory` pool (limit 1 in the shipped dagster.yaml), so LanceDB has
one writer at a time; each reads what changed since its cursor and does nothing otherwise. Each
says when it runs (cortex_pipelines/automation.py) and why. Bump an asset's code_version when its
logic (here or in the module it calls) changes what it produces, so the UI marks it changed.
"""

from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)

from cortex_pipelines.assets.checks import Check, checks_in_one_step
from cortex_pipelines.automation import (
    DAILY,
    EVERY_6_HOURS,
    HOURLY,
    WEEKLY,
    WITHIN_1_TO_2_MONTHS,
    WITHIN_3_TO_6_HOURS,
    WITHIN_3_TO_6_MONTHS,
    after_input,
    on_new_input,
)
from cortex_pipelines.llm import cost
from cortex_pipelines.memory import cockpit
from cortex_pipelines.memory.compaction import compact_idle_conversations
from cortex_pipelines.memory.harvest import harvest_ops
from cortex_pipelines.memory.maintenance import evict_to_cold, maintain
from cortex_pipelines.memory.observations import observe
from cortex_pipelines.memory.pipeline import extract_new_facts, index_episodes_for_recall
from cortex_pipelines.resources import (
    DatabaseResource,
    EmbedderResource,
    LLMResource,
    SettingsResource,
    VectorsResource,
)
from cortex_pipelines.storage import facts

MEMORY_POOL = "cortex_memory"
_common = {"group_name": "memory", "pool": MEMORY_POOL}


@asset(
    deps=["session_messages"],
    kinds={"lancedb", "sentence-transformers"},
    description="Every session message embedded into LanceDB (episodic memory), resumable by cursor.",
    # Turns are embedded as they are recorded; this is the backfill: new turns only.
    automation_condition=on_new_input(EVERY_6_HOURS),
    code_version="2",
    **_common,
)
def episodic_memory(
    context: AssetExecutionContext,
    settings: SettingsResource,
    database: DatabaseResource,
    vectors: VectorsResource,
    embedder: EmbedderResource,
) -> MaterializeResult:
    db, store = database.get(), vectors.get()
    added = index_episodes_for_recall(db, store, embedder.get(), settings.get(), log=context.log.info)
    return MaterializeResult(metadata={"indexed": added, **cockpit.memory_sizes(db, store)})


@asset(
    deps=["session_messages"],
    kinds={"duckdb", "lancedb", "anthropic"},
    description="Typed facts extracted from new user turns, deduplicated at write time (hot memory).",
    # LLM-backed and only new turns matter; memory_sensor extracts sooner when enough turns wait.
    automation_condition=on_new_input(EVERY_6_HOURS),
    code_version="2",
    **_common,
)
def extracted_facts(
    context: AssetExecutionContext,
    settings: SettingsResource,
    database: DatabaseResource,
    vectors: VectorsResource,
    embedder: EmbedderResource,
    llm: LLMResource,
) -> MaterializeResult:
    db, store, config = database.get(), vectors.get(), settings.get()
    meter = cost.Meter.start(db, config, "extraction")
    client = meter.budgeted(llm.memory_client(), context.log.warning)
    report = extract_new_facts(
        db,
        store,
        embedder.get(),
        config,
        client,
        log=context.log.info,
        within_budget=lambda: cost.within_budget(db, config, "extraction"),
    )
    current = cockpit.current_memory(db, config)
    return MaterializeResult(
        metadata={
            "turns_read": report.turns_read,
            "new_facts": len(report.new),
            "reinforced_facts": len(report.reinforced),
            "outdated_facts": len(report.outdated),
            "llm_calls": report.llm_calls,
            "input_tokens": report.input_tokens,
            "output_tokens": report.output_tokens,
            **meter.metadata(),
            **cockpit.memory_sizes(db, store),
            "preview": MetadataValue.md(cockpit.new_facts(db, report.new)),
            "current_facts": current.facts,
            "current_memory": MetadataValue.md(current.table),
            "turns_without_fact": current.turns_without_fact,
        }
    )


@asset(
    deps=["session_messages"],
    kinds={"duckdb", "anthropic", "markdown"},
    description="Idle foreground conversations summarized (rolling, each its own) and demoted to background.",
    # A conversation becomes idle when its input stops (compaction_idle_minutes, 60 by default), so
    # this keeps its hourly tick for 3 to 6 hours after the last turn. A run with no idle
    # conversation makes no LLM call.
    automation_condition=after_input(HOURLY, WITHIN_3_TO_6_HOURS),
    code_version="1",
    **_common,
)
def channel_summaries(
    context: AssetExecutionContext, settings: SettingsResource, database: DatabaseResource, llm: LLMResource
) -> MaterializeResult:
    db, config = database.get(), settings.get()
    meter = cost.Meter.start(db, config, "summary")
    client = meter.budgeted(llm.memory_client(), context.log.warning)
    report = compact_idle_conversations(db, config, client)
    return MaterializeResult(
        metadata={
            "compacted_conversations": len(report.compacted),
            "llm_calls": report.llm_calls,
            **meter.metadata(),
            "hot_snapshot": str(report.snapshot) if report.snapshot else "not written",
            "preview": MetadataValue.md(cockpit.summaries_preview(report.summaries)),
        }
    )


@asset(
    deps=["extracted_facts"],
    kinds={"duckdb", "lancedb"},
    description="Stale hot facts (old, rarely used) moved to LanceDB-only cold storage.",
    # Facts go cold by age (cold_after_days, 14 by default), with no new input: the weekly tick
    # keeps firing for one to two months after extraction last ran. No LLM.
    automation_condition=after_input(WEEKLY, WITHIN_1_TO_2_MONTHS),
    code_version="1",
    **_common,
)
def cold_memory(
    context: AssetExecutionContext,
    settings: SettingsResource,
    database: DatabaseResource,
    vectors: VectorsResource,
) -> MaterializeResult:
    db, store = database.get(), vectors.get()
    evicted = evict_to_cold(db, store, settings.get())
    if evicted:
        context.log.info(f"evicted {len(evicted)} fact(s) to cold storage: {evicted[:20]}")
    return MaterializeResult(metadata={"evicted": len(evicted), **cockpit.memory_sizes(db, store)})


@asset(
    deps=["session_messages"],
    kinds={"duckdb", "lancedb"},
    description="Results of delegated work turned into facts; ops marked gardened, archived after 7 days.",
    # Results arrive as messages; archiving what aged can wait for the next one. No LLM.
    automation_condition=on_new_input(EVERY_6_HOURS),
    code_version="1",
    **_common,
)
def harvested_ops(
    context: AssetExecutionContext,
    settings: SettingsResource,
    database: DatabaseResource,
    vectors: VectorsResource,
    embedder: EmbedderResource,
) -> MaterializeResult:
    db = database.get()
    report = harvest_ops(db, vectors.get(), embedder.get(), settings.get())
    return MaterializeResult(
        metadata={
            "harvested_ops": len(report.op_ids),
            "new_facts": len(report.new),
            "archived_ops": report.archived,
            "preview": MetadataValue.md(cockpit.new_facts(db, report.new)),
        }
    )


@asset(
    deps=["extracted_facts", "harvested_ops"],
    kinds={"duckdb", "lancedb"},
    description="Daily upkeep: bounded decay (identity exempt), prune, merge, consolidate, optimize.",
    # Decay is one step per run for facts unused for decay_after_days (30); about 45 more steps
    # take an unused fact below prune_threshold. So the daily tick keeps firing for three to six
    # months after extraction or harvest last ran, then stops. No LLM.
    automation_condition=after_input(DAILY, WITHIN_3_TO_6_MONTHS),
    code_version="1",
    **_common,
)
def memory_maintenance(
    context: AssetExecutionContext,
    settings: SettingsResource,
    database: DatabaseResource,
    vectors: VectorsResource,
    embedder: EmbedderResource,
) -> MaterializeResult:
    db, store = database.get(), vectors.get()
    report = maintain(db, store, embedder.get(), settings.get())
    return MaterializeResult(
        metadata={
            "decayed": report.decayed,
            "pruned": len(report.pruned),
            "merged": len(report.merged),
            "consolidated": len(report.consolidated),
            "resynced": report.resynced,
            **cockpit.memory_sizes(db, store),
        }
    )


@asset(
    deps=["extracted_facts"],
    kinds={"duckdb", "lancedb", "anthropic"},
    description="Repeated behaviour over the last active week (topics, places, timezones, active hours) "
    "saved as observation memories with their sources.",
    # The week is the last *active* week, so nothing changes without new facts. LLM-backed.
    automation_condition=on_new_input(DAILY),
    code_version="1",
    **_common,
)
def observations(
    context: AssetExecutionContext,
    settings: SettingsResource,
    database: DatabaseResource,
    vectors: VectorsResource,
    embedder: EmbedderResource,
    llm: LLMResource,
) -> MaterializeResult:
    db, config = database.get(), settings.get()
    meter = cost.Meter.start(db, config, "observations")
    client = meter.budgeted(llm.memory_client(), context.log.warning)
    report = observe(db, vectors.get(), embedder.get(), config, client)
    return MaterializeResult(
        metadata={
            "observations": len(report.found),
            "evidence_changed": report.changed,
            "new_facts": len(report.new),
            "reinforced_facts": len(report.reinforced),
            "llm_calls": report.llm_calls,
            **meter.metadata(),
            "preview": MetadataValue.md(cockpit.observations_preview(report.found)),
        }
    )


def no_duplicate_facts(resources) -> AssetCheckResult:
    groups = resources.database.get().run(facts.duplicate_groups)
    return AssetCheckResult(passed=not groups, metadata={"duplicate_groups": groups})


def facts_have_sources(resources) -> AssetCheckResult:
    orphans = resources.database.get().run(facts.active_without_sources)
    return AssetCheckResult(passed=orphans == 0, metadata={"facts_without_sources": orphans})


def hot_memory_within_cap(resources) -> AssetCheckResult:
    hot = resources.database.get().run(facts.tier_counts)["hot"]
    cap = resources.settings.get().hot_cap
    return AssetCheckResult(passed=hot <= cap, metadata={"hot": hot, "cap": cap})


def lancedb_agrees_with_duckdb(resources) -> AssetCheckResult:
    missing, stale = cockpit.semantic_drift(resources.database.get(), resources.vectors.get())
    return AssetCheckResult(
        passed=not missing and not stale,
        metadata={"missing_in_lancedb": missing, "stale_in_lancedb": stale},
    )


MEMORY_ASSETS = [
    episodic_memory,
    extracted_facts,
    channel_summaries,
    cold_memory,
    harvested_ops,
    memory_maintenance,
    observations,
]
MEMORY_CHECKS = [
    checks_in_one_step(
        "memory_checks",
        "The facts' integrity: no duplicates, sources, the hot cap, LanceDB in step with DuckDB.",
        [
            Check(
                "no_duplicate_facts",
                "extracted_facts",
                "No two active facts share a normalized text.",
                no_duplicate_facts,
            ),
            Check(
                "facts_have_sources",
                "extracted_facts",
                "Every active fact names the messages it came from.",
                facts_have_sources,
            ),
            Check(
                "hot_memory_within_cap",
                "extracted_facts",
                "Hot memory stays within its cap.",
                hot_memory_within_cap,
            ),
            Check(
                "lancedb_agrees_with_duckdb",
                "extracted_facts",
                "LanceDB's semantic table agrees with DuckDB.",
                lancedb_agrees_with_duckdb,
            ),
        ],
    )
]
