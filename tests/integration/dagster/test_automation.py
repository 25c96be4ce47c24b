"""The automation conditions, evaluated by Dagster as the automation sensor evaluates them: an idle
instance requests nothing, a processed message is extracted at the next 6-hour tick, and time-driven
work (compaction) keeps its ticks for a few hours after the last message, then stops."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dagster import AssetMaterialization, DagsterInstance, evaluate_automation_conditions, materialize

from cortex_pipelines.assets import ALL_ASSETS
from cortex_pipelines.definitions import defs
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.storage import bus
from tests.support.inbox import drop, msg
from tests.support.scripted_llm import ScriptedClient, scripted_resources

# A Monday, a few minutes past the hour: every tick (minute 50) falls between two evaluations. In the
# future, so the tick times come after the real time the test's materializations carry.
T0 = datetime(2030, 1, 7, 0, 7, tzinfo=UTC)
ASSETS = defs.resolve_asset_graph().get_all_asset_keys()


class Sensor:
    """Evaluates every automation condition at simulated times, carrying the cursor from tick to
    tick; what a tick requests is then reported materialized, as its run would do."""

    def __init__(self, instance: DagsterInstance):
        self.instance = instance
        self.cursor = None
        self.time = T0
        self.tick(T0)

    def tick(self, when: datetime) -> set[str]:
        result = evaluate_automation_conditions(
            defs=defs, instance=self.instance, evaluation_time=when, cursor=self.cursor
        )
        self.cursor, self.time = result.cursor, when
        requested = {key.to_user_string() for key in ASSETS if result.get_num_requested(key)}
        for name in requested:
            self.instance.report_runless_asset_event(AssetMaterialization(name))
        return requested

    def until(self, end: datetime, step: timedelta) -> dict[datetime, set[str]]:
        """Ticks every `step` up to `end`; the requests of the ticks that requested anything."""
        requests = {}
        while self.time + step <= end:
            if requested := self.tick(self.time + step):
                requests[self.time] = requested
        return requests


def _process_a_message(settings, db, instance) -> None:
    drop(settings, "webchat", "a.json", msg("webchat", "I prefer window seats.", "1"))
    ingest_inbox(settings, db)
    resources = scripted_resources(str(settings.home), ScriptedClient("Noted."))
    session = [a for a in ALL_ASSETS if a.key.path[0] == "session_messages"]
    assert materialize(ALL_ASSETS, instance=instance, resources=resources, selection=session).success
    assert db.run(bus.counts)["completed"] == 1


def test_an_idle_instance_requests_nothing_for_a_week():
    with DagsterInstance.ephemeral() as instance:
        sensor = Sensor(instance)
        assert sensor.until(T0 + timedelta(days=8), timedelta(hours=2)) == {}  # Sunday's weekly tick too


def test_a_processed_message_is_extracted_at_the_next_6_hour_tick_and_only_then(settings, db):
    with DagsterInstance.ephemeral() as instance:
        sensor = Sensor(instance)
        _process_a_message(settings, db, instance)
        assert sensor.tick(T0 + timedelta(minutes=20)) == set()  # 00:27: no tick has passed
        first = sensor.tick(T0 + timedelta(minutes=50))  # 00:57, after the 00:50 tick
        assert {"episodic_memory", "extracted_facts", "harvested_ops", "memory_bulletin"} <= first
        assert {"threads", "decisions", "narrative", "boot_context", "channel_summaries"} <= first
        later = sensor.until(T0 + timedelta(hours=13), timedelta(hours=1))
    assert not any("extracted_facts" in names for names in later.values())  # nothing new since


def test_compaction_keeps_its_hourly_tick_for_hours_after_the_last_message_then_stops(settings, db):
    with DagsterInstance.ephemeral() as instance:
        sensor = Sensor(instance)
        _process_a_message(settings, db, instance)
        requests = sensor.until(T0 + timedelta(hours=8), timedelta(minutes=15))
        requests |= sensor.until(T0 + timedelta(days=2), timedelta(hours=1))
    compacted = sorted(when for when, names in requests.items() if "channel_summaries" in names)
    # Every hourly tick from 00:50 to 05:50: the channel goes idle an hour after the message, and
    # the 06:00 reset ends the window (at least three hours, at most six, after the message).
    assert [f"{when:%H:%M}" for when in compacted] == [f"{h:02d}:52" for h in range(6)]
    assert compacted[-1] < T0 + timedelta(hours=6)
    # Conversation-driven assets ran once, at their first tick; nothing but compaction, the daily
    # maintenance run and what that run changed followed.
    assert sum("threads" in names for names in requests.values()) == 1
    after = set().union(*(names for when, names in requests.items() if when > T0 + timedelta(hours=7)))
    assert after <= {"memory_maintenance", "memory_bulletin", "boot_context"}
