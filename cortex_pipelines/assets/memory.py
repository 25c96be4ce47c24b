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

from cortex_pipelines.memory import store
from cortex_pipelines.memory.compaction import compact_idle_channels
from cortex_pipelines.memory.harvest import harvest_drafts, mark_gardened
from cortex_pipelines.memory.maintenance import (
    MaintenanceReport,
    decay_and_prune,
    evict_to_cold,
    merge_and_consolidate,
)
from cortex_pipelines.memory.observations import observe
from cortex_pipelines.memory.pipeline import (
    extract_new_facts,
    index_episodes,
    remember,
    sync_facts,
)
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC
from cortex_pipelines.publish.safe import one_line
from cortex_pipelines.resources import CortexResource

MEMORY_POOL = "cortex_memory"
_common = {"group_name": "memory", "pool": MEMORY_POOL}


def _fact_table(db, ids: list[int]) -> str:
    if not ids:
        return "_no new facts_"
    rows = db.query_dicts(
        "SELECT id, category, importance, text, sources FROM facts WHERE id IN (SELECT unnest(?)) "
        "ORDER BY id",
        [ids[:50]],
    )
    lines = ["| id | category | imp | fact | sources |", "|---|---|---|---|---|"]
    lines += [
        f"| {r['id']} | {r['category']} | {r['importance']:g} | {one_line(r['text'], 120)} "
        f"| {', '.join(map(str, r['sources']))} |"
        for r in rows
    ]
    return "\n".join(lines)


def _memory_sizes(cortex: CortexResource) -> dict:
    db = cortex.database()
    tiers = db.run(store.tier_counts)
    return {
        "hot_facts": tiers["hot"],
        "cold_facts": tiers["cold"],
        "episodic_rows": cortex.vectors().count(EPISODIC),
    }


@asset(
    deps=["session_messages"],
    kinds={"lancedb", "sentence-transformers"},
    description="Every session message embedded into LanceDB (episodic memory), resumable by cursor.",
    **_common,
)
def episodic_memory(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    added = index_episodes(
        cortex.database(), cortex.vectors(), cortex.embedder(), cortex.settings(), log=context.log.info
    )
    if added:  # build and save recall's snapshot here, so the next query loads it rather than builds it
        cortex.vectors().snapshot(EPISODIC)
    return MaterializeResult(metadata={"indexed": added, **_memory_sizes(cortex)})


@asset(
    deps=["session_messages"],
    kinds={"duckdb", "lancedb", "anthropic"},
    description="Typed facts extracted from new user turns, deduplicated at write time (hot memory).",
    **_common,
)
def extracted_facts(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db = cortex.database()
    report = extract_new_facts(
        db, cortex.vectors(), cortex.embedder(), cortex.settings(), cortex.memory_llm(), log=context.log.info
    )
    return MaterializeResult(
        metadata={
            "turns_read": report.turns_read,
            "new_facts": len(report.new),
            "reinforced_facts": len(report.reinforced),
            "outdated_facts": len(report.outdated),
            "llm_calls": report.llm_calls,
            "input_tokens": report.input_tokens,
            "output_tokens": report.output_tokens,
            **_memory_sizes(cortex),
            "preview": MetadataValue.md(_fact_table(db, report.new)),
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
    preview = (
        "\n".join(f"- **{one_line(c, 64)}**: {one_line(s, 500)}" for c, s in report.summaries.items())
        or "_nothing idle_"
    )
    return MaterializeResult(
        metadata={
            "compacted_channels": len(report.compacted),
            "llm_calls": report.llm_calls,
            "hot_snapshot": str(report.snapshot) if report.snapshot else "not written",
            "preview": MetadataValue.md(preview),
        }
    )


@asset(
    deps=["extracted_facts"],
    kinds={"duckdb", "lancedb"},
    description="Stale hot facts (old, rarely used) moved to LanceDB-only cold storage.",
    **_common,
)
def cold_memory(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    evicted = evict_to_cold(cortex.database(), cortex.vectors(), cortex.settings())
    if evicted:
        context.log.info(f"evicted {len(evicted)} fact(s) to cold storage: {evicted[:20]}")
    return MaterializeResult(metadata={"evicted": len(evicted), **_memory_sizes(cortex)})


@asset(
    deps=["session_messages"],
    kinds={"duckdb", "lancedb"},
    description="Results of delegated work turned into facts; ops marked gardened, archived after 7 days.",
    **_common,
)
def harvested_ops(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, settings = cortex.database(), cortex.settings()
    op_ids, drafts = harvest_drafts(db, settings)
    written = remember(db, cortex.vectors(), cortex.embedder(), settings, drafts) if drafts else None
    archived = mark_gardened(db, op_ids, settings.op_archive_days)
    new = written.new if written else []
    return MaterializeResult(
        metadata={
            "harvested_ops": len(op_ids),
            "new_facts": len(new),
            "archived_ops": archived,
            "preview": MetadataValue.md(_fact_table(db, new)),
        }
    )


@asset(
    deps=["extracted_facts", "harvested_ops"],
    kinds={"duckdb", "lancedb"},
    description="Daily upkeep: bounded decay (identity exempt), prune, merge, consolidate, optimize.",
    **_common,
)
def memory_maintenance(context: AssetExecutionContext, cortex: CortexResource) -> MaterializeResult:
    db, settings, vectors = cortex.database(), cortex.settings(), cortex.vectors()
    report = MaintenanceReport()
    decay_and_prune(db, settings, report)
    merge_and_consolidate(db, vectors, settings, report)
    synced = sync_facts(db, vectors, cortex.embedder(), settings)
    for table in (EPISODIC, SEMANTIC):
        vectors.optimize(table)
        vectors.snapshot(table)  # a new version: save recall's snapshot of it now, not on a query
    return MaterializeResult(
        metadata={
            "decayed": report.decayed,
            "pruned": len(report.pruned),
            "merged": len(report.merged),
            "consolidated": len(report.consolidated),
            "resynced": synced,
            **_memory_sizes(cortex),
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
    db = cortex.database()
    report = observe(db, cortex.vectors(), cortex.embedder(), cortex.settings(), cortex.memory_llm())
    preview = "\n".join(
        f"- {one_line(o.text, 300)} _({one_line(o.evidence, 200)}; messages {list(o.sources)[:8]})_"
        for o in report.found
    )
    return MaterializeResult(
        metadata={
            "observations": len(report.found),
            "evidence_changed": report.changed,
            "new_facts": len(report.new),
            "reinforced_facts": len(report.reinforced),
            "llm_calls": report.llm_calls,
            "preview": MetadataValue.md(preview or "_no repeated behaviour yet_"),
        }
    )


@asset_check(asset=extracted_facts, description="No two active facts share a normalized text.")
def no_duplicate_facts(cortex: CortexResource) -> AssetCheckResult:
    dupes = cortex.database().query(
        "SELECT norm_hash, count(*) FROM facts WHERE status = 'active' GROUP BY norm_hash HAVING count(*) > 1"
    )
    return AssetCheckResult(passed=not dupes, metadata={"duplicate_groups": len(dupes)})


@asset_check(asset=extracted_facts, description="Every active fact names the messages it came from.")
def facts_have_sources(cortex: CortexResource) -> AssetCheckResult:
    orphans = cortex.database().query(
        "SELECT count(*) FROM facts WHERE status = 'active' AND len(sources) = 0"
    )[0][0]
    return AssetCheckResult(passed=orphans == 0, metadata={"facts_without_sources": orphans})


@asset_check(asset=extracted_facts, description="Hot memory stays within its cap.")
def hot_memory_within_cap(cortex: CortexResource) -> AssetCheckResult:
    hot = cortex.database().run(store.tier_counts)["hot"]
    cap = cortex.settings().hot_cap
    return AssetCheckResult(passed=hot <= cap, metadata={"hot": hot, "cap": cap})


@asset_check(asset=extracted_facts, description="LanceDB's semantic table agrees with DuckDB.")
def lancedb_agrees_with_duckdb(cortex: CortexResource) -> AssetCheckResult:
    db, vectors = cortex.database(), cortex.vectors()
    truth = {r[0] for r in db.query("SELECT id FROM facts WHERE status = 'active'")}
    mirrored = vectors.ids(SEMANTIC, "status = 'active'")
    return AssetCheckResult(
        passed=truth == mirrored,
        metadata={"missing_in_lancedb": len(truth - mirrored), "stale_in_lancedb": len(mirrored - truth)},
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
