"""Memory assets: thin Dagster definitions over cortex_pipelines.memory.

All of them share the `cortex_memory` pool (limit 1 in the shipped dagster.yaml), so LanceDB has
one writer at a time; each reads what changed since its cursor and does nothing otherwise.
"""

from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)

from cortex_pipelines.memory import cockpit
from cortex_pipelines.memory.compaction import compact_idle_channels
from cortex_pipelines.memory.harvest import harvest_ops
from cortex_pipelines.memory.maintenance import evict_to_cold, maintain
from cortex_pipelines.memory.observations import observe
from cortex_pipelines.memory.pipeline import extract_new_facts, index_episodes_for_recall
from cortex_pipelines.resources import CortexResource
from cortex_pipelines.storage import facts

MEMORY_POOL = "cortex_memory"
_common = {"group_name": "memory", "pool": MEMORY_POOL}


@asset(
    deps=["session_messages"],
    kinds={"lancedb", "sentence-transformers"},
    description="Every session message embedded into LanceDB (episodic memory), resumable by cursor.",
    **_common,
)
def episodic_memory(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, vectors = cortex.database(), cortex.vectors()
    added = index_episodes_for_recall(db, vectors, cortex.embedder(), cortex.settings(), log=context.log.info)
    return MaterializeResult(metadata={"indexed": added, **cockpit.memory_sizes(db, vectors)})


@asset(
    deps=["session_messages"],
    kinds={"duckdb", "lancedb", "anthropic"},
    description="Typed facts extracted from new user turns, deduplicated at write time (hot memory).",
    **_common,
)
def extracted_facts(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, vectors, settings = cortex.database(), cortex.vectors(), cortex.settings()
    report = extract_new_facts(
        db, vectors, cortex.embedder(), settings, cortex.memory_llm(), log=context.log.info
    )
    current = cockpit.current_memory(db, settings)
    return MaterializeResult(
        metadata={
            "turns_read": report.turns_read,
            "new_facts": len(report.new),
            "reinforced_facts": len(report.reinforced),
            "outdated_facts": len(report.outdated),
            "llm_calls": report.llm_calls,
            "input_tokens": report.input_tokens,
            "output_tokens": report.output_tokens,
            **cockpit.memory_sizes(db, vectors),
            "preview": MetadataValue.md(cockpit.new_facts(db, report.new)),
            "current_facts": current.facts,
            "current_memory": MetadataValue.md(current.table),
            "turns_without_fact": current.turns_without_fact,
        }
    )


@asset(
    deps=["session_messages"],
    kinds={"duckdb", "anthropic", "markdown"},
    description="Idle foreground channels summarized (rolling per topic) and demoted to background.",
    **_common,
)
def channel_summaries(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    report = compact_idle_channels(cortex.database(), cortex.settings(), cortex.memory_llm())
    return MaterializeResult(
        metadata={
            "compacted_channels": len(report.compacted),
            "llm_calls": report.llm_calls,
            "hot_snapshot": str(report.snapshot) if report.snapshot else "not written",
            "preview": MetadataValue.md(cockpit.summaries_preview(report.summaries)),
        }
    )


@asset(
    deps=["extracted_facts"],
    kinds={"duckdb", "lancedb"},
    description="Stale hot facts (old, rarely used) moved to LanceDB-only cold storage.",
    **_common,
)
def cold_memory(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, vectors = cortex.database(), cortex.vectors()
    evicted = evict_to_cold(db, vectors, cortex.settings())
    if evicted:
        context.log.info(f"evicted {len(evicted)} fact(s) to cold storage: {evicted[:20]}")
    return MaterializeResult(metadata={"evicted": len(evicted), **cockpit.memory_sizes(db, vectors)})


@asset(
    deps=["session_messages"],
    kinds={"duckdb", "lancedb"},
    description="Results of delegated work turned into facts; ops marked gardened, archived after 7 days.",
    **_common,
)
def harvested_ops(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db = cortex.database()
    report = harvest_ops(db, cortex.vectors(), cortex.embedder(), cortex.settings())
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
    **_common,
)
def memory_maintenance(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, vectors = cortex.database(), cortex.vectors()
    report = maintain(db, vectors, cortex.embedder(), cortex.settings())
    return MaterializeResult(
        metadata={
            "decayed": report.decayed,
            "pruned": len(report.pruned),
            "merged": len(report.merged),
            "consolidated": len(report.consolidated),
            "resynced": report.resynced,
            **cockpit.memory_sizes(db, vectors),
        }
    )


@asset(
    deps=["extracted_facts"],
    kinds={"duckdb", "lancedb", "anthropic"},
    description="Repeated behaviour over the last active week (topics, places, timezones, active hours) "
    "saved as observation memories with their sources.",
    **_common,
)
def observations(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    report = observe(
        cortex.database(), cortex.vectors(), cortex.embedder(), cortex.settings(), cortex.memory_llm()
    )
    return MaterializeResult(
        metadata={
            "observations": len(report.found),
            "evidence_changed": report.changed,
            "new_facts": len(report.new),
            "reinforced_facts": len(report.reinforced),
            "llm_calls": report.llm_calls,
            "preview": MetadataValue.md(cockpit.observations_preview(report.found)),
        }
    )


@asset_check(asset=extracted_facts, description="No two active facts share a normalized text.")
def no_duplicate_facts(cortex: CortexResource) -> AssetCheckResult:
    groups = cortex.database().run(facts.duplicate_groups)
    return AssetCheckResult(passed=not groups, metadata={"duplicate_groups": groups})


@asset_check(asset=extracted_facts, description="Every active fact names the messages it came from.")
def facts_have_sources(cortex: CortexResource) -> AssetCheckResult:
    orphans = cortex.database().run(facts.active_without_sources)
    return AssetCheckResult(passed=orphans == 0, metadata={"facts_without_sources": orphans})


@asset_check(asset=extracted_facts, description="Hot memory stays within its cap.")
def hot_memory_within_cap(cortex: CortexResource) -> AssetCheckResult:
    hot = cortex.database().run(facts.tier_counts)["hot"]
    cap = cortex.settings().hot_cap
    return AssetCheckResult(passed=hot <= cap, metadata={"hot": hot, "cap": cap})


@asset_check(asset=extracted_facts, description="LanceDB's semantic table agrees with DuckDB.")
def lancedb_agrees_with_duckdb(cortex: CortexResource) -> AssetCheckResult:
    missing, stale = cockpit.semantic_drift(cortex.database(), cortex.vectors())
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
MEMORY_CHECKS = [no_duplicate_facts, facts_have_sources, hot_memory_within_cap, lancedb_agrees_with_duckdb]
