"""A step waiting for a pool slot is never left waiting for a slot that is free (CI: one of two
`cortex run`s started together on a fresh home waited for ever after its ingest line).

Dagster's own claim, in Dagster's own order on the home's real SQLite storage: run B's step looks at
the pool (full: run A holds its one slot), A frees the slot (Dagster hands it to the queue, empty
yet), B's step joins the queue. Nothing hands B the free slot, until the sensors' reaping (which
`cortex run` also does before its job), `cortex run`'s waker during its job, or under `cortex dev`
the inbox sensor's next tick."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dagster import DagsterInstance
from dagster._utils.concurrency import ConcurrencySlotStatus

from cortex_pipelines.assets.memory import MEMORY_POOL
from cortex_pipelines.lanes import forgotten_steps_woken, reap_dead_runs, wake_forgotten_steps
from cortex_pipelines.sensors.inbox import inbox_sensor
from tests.support.cli import cortex
from tests.support.sensors import evaluate

CLAIMED, BLOCKED = ConcurrencySlotStatus.CLAIMED, ConcurrencySlotStatus.BLOCKED


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def instance(home: Path):
    cortex("init", home=home)  # the shipped dagster.yaml: every pool one slot
    with DagsterInstance.from_config(str(home / "dagster_home")) as opened:
        # as a run's first claim in the pool does
        opened.event_log_storage.initialize_concurrency_limit_to_default(MEMORY_POOL)
        yield opened


def _claim(instance: DagsterInstance, run_id: str, step: str) -> ConcurrencySlotStatus:
    return instance.event_log_storage.claim_concurrency_slot(MEMORY_POOL, run_id, step).slot_status


def _forgotten_step(instance: DagsterInstance) -> None:
    """Run B's step queued unassigned while the pool's one slot is free."""
    storage = instance.event_log_storage
    assert _claim(instance, "run-a", "extract") == CLAIMED
    assert not storage.has_unassigned_slots(MEMORY_POOL)  # B's look: the pool is full
    storage.free_concurrency_slot_for_step("run-a", "extract")  # A's step ends; the queue is empty
    storage.add_pending_step(MEMORY_POOL, "run-b", "extract", should_assign=False)  # B joins it
    assert [_claim(instance, "run-b", "extract") for _ in range(3)] == [BLOCKED] * 3


def test_dagster_forgets_the_step_and_the_reaping_of_dead_runs_hands_it_the_slot(instance):
    _forgotten_step(instance)
    time.sleep(1)
    assert _claim(instance, "run-b", "extract") == BLOCKED  # waiting on its own would be for ever

    reap_dead_runs(instance, [MEMORY_POOL])
    assert _claim(instance, "run-b", "extract") == CLAIMED


def test_cortex_runs_waker_hands_the_slot_on_while_its_job_runs(instance):
    _forgotten_step(instance)
    with forgotten_steps_woken(instance, [MEMORY_POOL], every_s=0.1):
        deadline = time.monotonic() + 10
        while (status := _claim(instance, "run-b", "extract")) != CLAIMED and time.monotonic() < deadline:
            time.sleep(0.1)
    assert status == CLAIMED


def test_under_cortex_dev_the_inbox_sensors_next_tick_hands_the_slot_on(instance, home):
    _forgotten_step(instance)
    evaluate(inbox_sensor, instance, str(home))  # ticks about every 5 s; supervision's, every 60 s
    assert _claim(instance, "run-b", "extract") == CLAIMED


def test_a_slot_still_held_is_handed_to_no_one(instance):
    assert _claim(instance, "run-a", "extract") == CLAIMED
    assert _claim(instance, "run-b", "extract") == BLOCKED  # queued behind A, as Dagster queues it

    assert wake_forgotten_steps(instance, [MEMORY_POOL]) == []
    assert _claim(instance, "run-b", "extract") == BLOCKED
    pending = instance.event_log_storage.get_concurrency_info(MEMORY_POOL).pending_steps
    assert [step.assigned_timestamp for step in pending if step.run_id == "run-b"] == [None]

    instance.event_log_storage.free_concurrency_slot_for_step("run-a", "extract")
    assert _claim(instance, "run-b", "extract") == CLAIMED  # Dagster's own hand-on, as before
