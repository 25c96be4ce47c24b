"""Memory with the real embedding model, real LanceDB and real DuckDB."""

from __future__ import annotations

import json
from datetime import timedelta

import pyarrow as pa
import pytest
from dagster import DagsterInstance, materialize

from cortex_pipelines.assets import ALL_ASSETS, ALL_CHECKS
from cortex_pipelines.config import load_settings
from cortex_pipelines.llm.anthropic_client import AnthropicClient
from cortex_pipelines.memory.dates import named_times
from cortex_pipelines.memory.embedder import get_embedder
from cortex_pipelines.memory.maintenance import (
    MaintenanceReport,
    decay_and_prune,
    evict_to_cold,
    merge_and_consolidate,
)
from cortex_pipelines.memory.pipeline import (
    embedder_id,
    extract_new_facts,
    index_episodes,
    remember,
    sync_facts,
)
from cortex_pipelines.memory.recall import note_use, recall
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, VectorStore, schema
from cortex_pipelines.resources import cortex_resources
from cortex_pipelines.storage import facts as fact_store
from cortex_pipelines.storage import utcnow
from cortex_pipelines.storage.facts import FactDraft
from tests.support.history import ingest_history
from tests.support.messages_server import text


@pytest.fixture
def vectors(settings) -> VectorStore:
    return VectorStore(settings.paths.lance)


@pytest.fixture(scope="session")
def embedder():
    return get_embedder()


def _extract(settings, db, vectors, embedder, llm=None):
    index_episodes(db, vectors, embedder, settings)
    return extract_new_facts(db, vectors, embedder, settings, llm)


def test_a_telegram_preference_is_recalled_from_webchat_with_its_sources(
    settings, db, vectors, embedder, tmp_path
):
    ids = ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "On long flights I prefer window seats, I like to sleep against the wall."),
        ("telegram", "The weather in Lisbon is lovely today."),
        ("webchat", "Let's plan the Berlin trip next week."),
    )
    report = _extract(settings, db, vectors, embedder)
    assert len(report.new) == 1
    hits = recall(db, settings, "Which seat should I book for Maya's flight?", k=3)
    top = hits[0]
    assert "window seats" in top.text and top.tier == "hot"
    assert top.sources == [ids[0]] and top.channel == "telegram"
    assert db.run(fact_store.get, top.fact_id)["hit_count"] == 0  # the search itself only reads
    note_use(db, settings, hits)  # what memory_query, `cortex recall` and /recall do with what they show
    assert db.run(fact_store.get, top.fact_id)["hit_count"] == 1  # a shown hot fact counts a hit


def test_a_query_naming_a_month_prefers_what_was_said_then(settings, db, vectors, embedder, tmp_path):
    assert named_times("What did I say on 3 June, 2023 and in July 2022, or in May?") == [
        (2023, 6, 3),
        (2022, 7, None),
        (None, 5, None),
    ]
    assert named_times("what may I cook") == []
    march = ingest_history(
        settings,
        db,
        tmp_path,
        ("webchat", "We hiked the long coast trail with the dogs and a picnic."),
        start="2026-03-10T09:00:00Z",
    )
    ingest_history(
        settings, db, tmp_path, ("webchat", "We hiked the coast trail."), start="2026-08-10T09:00:00Z"
    )
    index_episodes(db, vectors, embedder, settings)
    hits = recall(db, settings, "Where did we hike in March 2026?", k=2)
    assert hits[0].sources == march


def test_an_episodic_table_without_the_neighbour_column_is_rebuilt(settings, db, vectors, embedder, tmp_path):
    ids = ingest_history(settings, db, tmp_path, ("webchat", "First."), ("webchat", "Second."))
    model = embedder_id(embedder)
    old = pa.schema([f for f in schema(EPISODIC, 384, model) if f.name != "prev_id"])
    vectors._db().create_table(EPISODIC, schema=old)
    assert vectors.outdated(EPISODIC, model) == "it predates its current columns"
    assert index_episodes(db, vectors, embedder, settings) == 2
    assert vectors.outdated(EPISODIC, model) is None
    rows = vectors.table(EPISODIC).search().select(["id", "prev_id"]).to_arrow().to_pylist()
    assert sorted((r["id"], r["prev_id"]) for r in rows) == [(ids[0], None), (ids[1], ids[0])]


def test_the_same_fact_stated_three_ways_is_one_active_fact(settings, db, vectors, embedder, tmp_path):
    ids = ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "I'm vegetarian."),
        ("webchat", "Remember: I am vegetarian!"),
        ("whatsapp", "btw, i'm VEGETARIAN"),
    )
    report = _extract(settings, db, vectors, embedder)
    active = db.run(fact_store.active)
    assert len(active) == 1 and len(report.new) == 1
    assert sorted(active[0]["sources"]) == sorted(ids)
    assert sorted(active[0]["channels"]) == ["telegram", "webchat", "whatsapp"]
    # Said again later, in another batch: still one fact, one more source.
    more = ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "Just so you know, I'm vegetarian."),
        start="2026-11-05T09:00:00Z",
    )
    _extract(settings, db, vectors, embedder)
    active = db.run(fact_store.active)
    assert len(active) == 1 and more[0] in active[0]["sources"]


def test_write_time_dedupe_uses_cosine_for_near_identical_wording(settings, db, vectors, embedder):
    now = utcnow()
    first = remember(
        db,
        vectors,
        embedder,
        settings,
        [FactDraft("I prefer window seats", "preference", 2, (1,), ("telegram",), now)],
    )
    second = remember(
        db,
        vectors,
        embedder,
        settings,
        [
            FactDraft("I prefer window seats.", "preference", 2, (2,), ("webchat",), now),
            FactDraft("I prefer the window seats", "preference", 2, (3,), ("webchat",), now),
        ],
    )
    assert first.new and second.new == [] and second.reinforced == first.new * 2
    assert db.run(fact_store.get, first.new[0])["sources"] == [1, 2, 3]


def test_quoted_bulletin_and_bootstrap_text_creates_no_fact(settings, db, vectors, embedder, tmp_path):
    settings.paths.out.mkdir(parents=True, exist_ok=True)
    (settings.paths.out / "memory_bulletin.md").write_text(
        "# Memory Bulletin\n\n## Preferences\nThe user loves aisle seats on night trains.\n"
    )
    (settings.paths.out / "BOOTSTRAP.md").write_text(
        "# Boot context\nWe decided to move the whole team to Rust next quarter.\n"
    )
    ingest_history(
        settings,
        db,
        tmp_path,
        ("webchat", "My bulletin says: The user loves aisle seats on night trains. Is that right?"),
        ("webchat", "> We decided to move the whole team to Rust next quarter.\nWhere did that come from?"),
        ("webchat", "Your boot file claims we decided to move the whole team to Rust next quarter."),
        ("webchat", "I prefer tea over coffee in the afternoon."),
    )
    report = _extract(settings, db, vectors, embedder)
    texts = [f["text"] for f in db.run(fact_store.active)]
    assert texts == ["I prefer tea over coffee in the afternoon."], texts
    assert len(report.new) == 1


def test_eviction_to_cold_and_promotion_back(settings, db, vectors, embedder, tmp_path):
    ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "My favourite bakery is Padaria Lisboa on Rua Augusta."),
        ("telegram", "I love hiking in Sintra on Sundays."),
    )
    _extract(settings, db, vectors, embedder)
    facts = db.run(fact_store.active)
    assert len(facts) == 2
    bakery = next(f for f in facts if "bakery" in f["text"])
    old = utcnow() - timedelta(days=settings.cold_after_days + 1)
    db.run(lambda con: con.execute("UPDATE facts SET created_at = ?", [old]))
    db.run(lambda con: con.execute("UPDATE facts SET hit_count = 5 WHERE id <> ?", [bakery["id"]]))

    evicted = evict_to_cold(db, vectors, settings)
    assert evicted == [bakery["id"]]
    assert db.run(fact_store.tier_counts) == {"hot": 1, "cold": 1}
    assert vectors.ids(SEMANTIC, "tier = 'cold'") == {bakery["id"]}
    floor = [f["id"] for f in db.run(fact_store.hot_for_floor, 50)]
    assert bakery["id"] not in floor  # cold facts leave the system floor

    hit = recall(db, settings, "where do I buy my bread?", k=1)[0]
    assert hit.fact_id == bakery["id"] and hit.tier == "cold"
    note_use(db, settings, [hit])
    assert hit.tier == "hot"  # promoted once shown
    assert db.run(fact_store.get, bakery["id"])["tier"] == "hot"
    assert vectors.ids(SEMANTIC, "tier = 'cold'") == set()


def test_decay_and_prune_respect_identity_and_minimum_age(settings, db, vectors, embedder):
    s = load_settings(settings.home, decay_factor=0.5, decay_after_days=30, prune_min_age_days=30)
    now = utcnow()
    drafts = [
        FactDraft("My name is Maya Costa", "identity", 3, (1,), ("webchat",), now),
        FactDraft("I like jazz on rainy evenings", "preference", 2, (2,), ("webchat",), now),
        FactDraft("I enjoy long walks by the river", "preference", 2, (3,), ("webchat",), now),
    ]
    ids = remember(db, vectors, embedder, s, drafts).new
    identity, old_pref, young_pref = ids
    long_ago, recently = now - timedelta(days=90), now - timedelta(days=5)

    def age(con):
        con.execute(
            "UPDATE facts SET created_at = ?, last_accessed_at = ? WHERE id IN (?, ?)",
            [long_ago, long_ago, identity, old_pref],
        )
        # Unused for long, but only created recently: decays, is not yet pruned.
        con.execute(
            "UPDATE facts SET created_at = ?, last_accessed_at = ? WHERE id = ?",
            [recently, long_ago, young_pref],
        )

    db.run(age)
    for _ in range(4):  # 0.5**4 = 0.0625 < 0.1
        decay_and_prune(db, s, MaintenanceReport())
    facts = {f["id"]: f for f in db.query_dicts("SELECT id, status, decay FROM facts")}
    assert facts[identity]["decay"] == 1.0 and facts[identity]["status"] == "active"
    assert facts[old_pref]["status"] == "pruned"  # not "forgotten": nobody asked, its turns stay
    assert facts[young_pref]["status"] == "active" and facts[young_pref]["decay"] < 0.1
    events = db.query(
        "SELECT action, detail FROM fact_events WHERE fact_id = ? AND action = 'pruned'", [old_pref]
    )
    assert events and "decayed" in events[0][1]


def test_merge_supersedes_and_links_near_duplicates(settings, db, vectors, embedder):
    s = load_settings(settings.home, dedupe_cosine=0.999)  # let both in, so maintenance must merge
    now = utcnow()
    ids = remember(
        db,
        vectors,
        embedder,
        s,
        [
            FactDraft("I prefer window seats on flights", "preference", 2, (1,), ("telegram",), now),
            FactDraft("I prefer window seats on my flights", "preference", 3, (2,), ("webchat",), now),
        ],
    ).new
    assert len(ids) == 2
    report = MaintenanceReport()
    merge_and_consolidate(db, vectors, s, report)
    sync_facts(db, vectors, embedder, s)
    assert report.merged == [(ids[0], ids[1])]  # the more important one survives
    absorbed = db.run(fact_store.get, ids[0])
    survivor = db.run(fact_store.get, ids[1])
    assert absorbed["status"] == "superseded" and survivor["sources"] == [1, 2]
    assert db.query("SELECT superseded_by FROM facts WHERE id = ?", [ids[0]])[0][0] == ids[1]
    assert vectors.ids(SEMANTIC, "status = 'active'") == {ids[1]}


def test_forget_and_edit_never_resurface_the_old_text(settings, db, vectors, embedder):
    now = utcnow()
    wrong, other = remember(
        db,
        vectors,
        embedder,
        settings,
        [
            FactDraft("My dentist appointment is on Friday", "event", 2, (7,), ("webchat",), now),
            FactDraft("I am allergic to peanuts", "preference", 3, (8,), ("webchat",), now),
        ],
    ).new
    new_id = db.run(fact_store.edit, wrong, "My dentist appointment is on Monday")
    db.run(fact_store.forget, other, "user said it was wrong")
    sync_facts(db, vectors, embedder, settings)
    texts = [h.text for h in recall(db, settings, "dentist appointment day", k=5)]
    assert "My dentist appointment is on Monday" in texts
    assert "My dentist appointment is on Friday" not in texts
    assert not any("peanuts" in t for t in recall_texts(db, settings, "peanut allergy"))
    assert db.run(fact_store.get, new_id)["sources"] == [7]  # the correction keeps its provenance
    audit = [r[0] for r in db.query("SELECT action FROM fact_events WHERE fact_id IN (?, ?)", [wrong, other])]
    assert "superseded" in audit and "forgotten" in audit


def recall_texts(db, settings, query):
    return [h.text for h in recall(db, settings, query, k=5)]


def test_anthropic_extraction_path_and_idle_makes_no_calls(
    settings, db, vectors, embedder, tmp_path, messages_server
):
    ids = ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "Ich heiße Maya und ich wohne in Lissabon."),
        ("telegram", "ok cool"),
    )
    messages_server.script(
        text(
            json.dumps(
                [
                    {
                        "text": "Maya lives in Lisbon",
                        "category": "identity",
                        "importance": 3,
                        "source_ids": [ids[0]],
                    },
                    {
                        "text": "Invented without a source",
                        "category": "fact",
                        "importance": 1,
                        "source_ids": [999],
                    },
                ]
            )
        )
    )
    llm = AnthropicClient("claude-haiku-test", "k", messages_server.url, 10, 0)
    report = _extract(settings, db, vectors, embedder, llm)
    assert report.llm_calls == 1 and len(report.new) == 1
    request = messages_server.requests[0]
    assert request["model"] == "claude-haiku-test"
    assert f"[{ids[0]}] (telegram) Ich heiße Maya" in request["messages"][0]["content"]
    fact = db.run(fact_store.active)[0]
    assert fact["text"] == "Maya lives in Lisbon" and fact["sources"] == [ids[0]]
    assert db.query("SELECT purpose, asset FROM llm_usage") == [("extraction", "extracted_facts")]

    again = _extract(settings, db, vectors, embedder, llm)
    assert again.llm_calls == 0 and len(messages_server.requests) == 1


def test_an_extraction_answer_cut_at_max_tokens_is_asked_again_in_halves_then_by_patterns(
    settings, db, vectors, embedder, tmp_path, messages_server
):
    """An answer cut at max_tokens (or no JSON at all) had been read as "no facts" and its turns
    marked extracted: "I am allergic to penicillin" was never a fact (QA, helper-55). Now the model
    is asked again with half the turns; what it still cannot answer whole is extracted with patterns."""
    said = [
        "I am allergic to penicillin.",
        "My sister Ana lives in Porto.",
        "I work as a nurse at St Mary's.",
        "My car is a blue Fiat Panda.",
        "I play the cello on Sundays.",
        "My dentist is Dr. Weiss.",
        "I am vegetarian.",
        "My daughter's name is Lina.",
        "I live in Munich.",
        "My employer is Siemens.",
        "I run 5k every morning.",
        "My favourite tea is genmaicha.",
    ]
    ids = ingest_history(settings, db, tmp_path, *[("webchat", t) for t in said])

    def answer(body: dict):
        turns = [i for i in ids if f"[{i}] (webchat)" in body["messages"][0]["content"]]
        if len(turns) > 6:
            return text('[{"text": "The user is allergic to penic', stop_reason="max_tokens")
        if turns[0] == ids[0]:  # the first half: whole
            facts = [
                {
                    "text": f"Model: {said[ids.index(i)]}",
                    "category": "fact",
                    "importance": 3,
                    "source_ids": [i],
                }
                for i in turns
            ]
            return text(json.dumps(facts))
        return text("I'm sorry, I can't help with that.")  # the second half: a refusal, no JSON

    messages_server.responder = answer
    llm = AnthropicClient("claude-haiku-test", "k", messages_server.url, 10, 0)
    report = _extract(settings, db, vectors, embedder, llm)
    assert report.llm_calls == 3
    facts = " | ".join(f["text"] for f in db.run(fact_store.active))
    assert all(f"Model: {t}" in facts for t in said[:6]), facts  # the model's, for the first half
    assert all(word in facts for word in ("vegetarian", "Lina", "Munich", "genmaicha")), facts


def test_memory_assets_materialize_with_lineage_and_passing_checks(settings, db, tmp_path):
    ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "I prefer green tea in the morning."),
        ("webchat", "My goal is to run a half marathon in April."),
    )
    resources = cortex_resources(str(settings.home))
    with DagsterInstance.ephemeral() as instance:
        result = materialize(
            [*ALL_ASSETS, *ALL_CHECKS],
            instance=instance,
            resources=resources,
            selection=[a for a in ALL_ASSETS if a.key.path[0] != "bus_messages"],
        )
        assert result.success
        checks = result.get_asset_check_evaluations()
        check_keys = {k for c in ALL_CHECKS for k in c.check_keys}
        check_keys |= {spec.key for a in ALL_ASSETS for spec in getattr(a, "check_specs", ())}
        assert len(checks) == len(check_keys) and all(c.passed for c in checks), checks
        facts = result.asset_materializations_for_node("extracted_facts")[0].metadata
        assert facts["new_facts"].value == 2 and "green tea" in facts["preview"].value
        calls_before = db.query("SELECT count(*) FROM llm_usage")[0][0]
        again = materialize(
            [*ALL_ASSETS, *ALL_CHECKS],
            instance=instance,
            resources=resources,
            selection=[a for a in ALL_ASSETS if a.key.path[0] != "bus_messages"],
        )
        assert again.success
        assert again.asset_materializations_for_node("extracted_facts")[0].metadata["new_facts"].value == 0
        assert db.query("SELECT count(*) FROM llm_usage")[0][0] == calls_before
    assert db.query("SELECT count(*) FROM facts WHERE status = 'active'")[0][0] == 2


def test_extracted_facts_shows_the_current_memory_and_the_turns_without_a_fact(settings, db, tmp_path):
    tea, _, _, goal = ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "I prefer green tea | never <b>coffee</b> in the morning."),
        ("telegram", "ok thanks"),
        ("webchat", "lol"),
        ("webchat", "My goal is to run a half marathon in April."),
    )
    resources = cortex_resources(str(settings.home))
    memory = [a for a in ALL_ASSETS if a.key.path[0] in ("episodic_memory", "extracted_facts")]
    with DagsterInstance.ephemeral() as instance:
        first = materialize(memory, instance=instance, resources=resources)
        meta = first.asset_materializations_for_node("extracted_facts")[0].metadata
        table = meta["current_memory"].value
        (tea_row,) = [line for line in table.splitlines() if "green tea" in line]
        assert "| hot |" in tea_row and tea_row.endswith(f"| {tea} |")  # tier and source turn
        assert "\\| never &lt;b&gt;coffee" in tea_row  # the fact's text is escaped, not markup
        assert "half marathon" in table and meta["current_facts"].value == 2
        assert meta["turns_without_fact"].value == 2  # "ok thanks" and "lol"

        (goal_fact,) = [f for f in db.run(fact_store.active) if goal in f["sources"]]
        db.run(fact_store.forget, goal_fact["id"], "test")
        again = materialize(memory, instance=instance, resources=resources)
        meta = again.asset_materializations_for_node("extracted_facts")[0].metadata
        assert "half marathon" not in meta["current_memory"].value and meta["current_facts"].value == 1
        assert meta["turns_without_fact"].value == 2  # a forgotten fact still came from its turn


def test_harvested_op_becomes_a_fact_with_both_source_turns(settings, db, vectors, embedder):
    from cortex_pipelines.brain.loop import Brain
    from cortex_pipelines.ingest.inbox import ingest_inbox
    from cortex_pipelines.llm.offline import OfflineClient
    from cortex_pipelines.memory.harvest import harvest_drafts, mark_gardened
    from tests.support.inbox import drop, msg

    drop(settings, "webchat", "a.json", msg("webchat", "Can you research quiet cafés near Alfama?", "d1"))
    ingest_inbox(settings, db)
    Brain(db, settings, OfflineClient()).drain()
    op_id = db.query("SELECT id FROM pending_ops")[0][0]
    drop(
        settings,
        "router",
        "r.json",
        {
            **msg("router", "Result: Café Lua is the quietest.", "r1"),
            "sender": "router",
            "metadata": {"op_id": op_id},
        },
    )
    ingest_inbox(settings, db)
    Brain(db, settings, OfflineClient()).drain()

    op_ids, drafts = harvest_drafts(db, settings)
    assert op_ids == [op_id] and len(drafts) == 1
    written = remember(db, vectors, embedder, settings, drafts)
    mark_gardened(db, op_ids, settings.op_archive_days)
    fact = db.run(fact_store.get, written.new[0])
    asked, answered = (r[0] for r in db.query("SELECT id FROM session WHERE role = 'user' ORDER BY id"))
    assert fact["sources"] == [asked, answered] and "Café Lua" in fact["text"]
    assert harvest_drafts(db, settings) == ([], [])  # gardened: never harvested twice
    long_ago = utcnow() - timedelta(days=settings.op_archive_days + 1)
    db.run(lambda con: con.execute("UPDATE pending_ops SET gardened_at = ?", [long_ago]))
    assert mark_gardened(db, [], settings.op_archive_days) == 1
    assert db.query("SELECT status FROM pending_ops") == [("archived",)]


def test_idle_conversation_is_summarized_demoted_and_snapshotted_first(settings, db, tmp_path):
    from cortex_pipelines.memory.compaction import compact_idle_conversations

    ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "Planning the Helios workshop agenda today."),
        ("telegram", "The Helios workshop needs a projector."),
    )
    db.run(lambda con: con.execute("UPDATE conversations SET layer = 'foreground'"))
    report = compact_idle_conversations(db, settings, llm=None)
    assert report.compacted == ["telegram"]
    snapshot = (settings.paths.out / "hot-snapshot.md").read_text()
    assert "The Helios workshop needs a projector." in snapshot and "(msg " in snapshot
    layer, summary = db.query("SELECT layer, summary FROM conversations WHERE conversation = 'telegram'")[0]
    assert layer == "background" and "helios" in summary.lower()
    sources = db.query("SELECT sources FROM topic_summaries WHERE topic = 'telegram'")[0][0]
    assert len(sources) == 2
    again = compact_idle_conversations(db, settings, llm=None)  # nothing new: nothing to do
    assert again.compacted == []


def test_each_chat_and_topic_is_compacted_into_its_own_summary(settings, db, tmp_path):
    from cortex_pipelines.memory.compaction import compact_idle_conversations

    ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "Planning the Helios workshop agenda.", {"metadata": {"chat_id": 111}}),
        ("telegram", "The boiler in the flat is leaking.", {"metadata": {"chat_id": 222}}),
        ("telegram", "Helios needs a projector too.", {"metadata": {"chat_id": 111}}),
        ("telegram", "Porto trip: book the train.", {"metadata": {"chat_id": -100}, "thread": "7"}),
    )
    db.run(lambda con: con.execute("UPDATE conversations SET layer = 'foreground'"))
    report = compact_idle_conversations(db, settings, llm=None)
    assert report.compacted == ["telegram:-100:7", "telegram:111", "telegram:222"]
    summaries = dict(db.query("SELECT conversation, summary FROM conversations"))
    assert "helios" in summaries["telegram:111"].lower() and "boiler" not in summaries["telegram:111"].lower()
    assert "boiler" in summaries["telegram:222"].lower() and "helios" not in summaries["telegram:222"].lower()
    assert "porto" in summaries["telegram:-100:7"].lower()
    sources = dict(db.query("SELECT topic, len(sources) FROM topic_summaries"))
    assert sources == {"telegram:111": 2, "telegram:222": 1, "telegram:-100:7": 1}
    snapshot = (settings.paths.out / "hot-snapshot.md").read_text()
    assert "## telegram:111\n" in snapshot and "## telegram:-100:7\n" in snapshot
    section_222 = snapshot.split("## telegram:222\n")[1].split("##")[0]
    assert "boiler" in section_222 and "Helios" not in section_222
