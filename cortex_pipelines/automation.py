"""When the memory and publish assets run: declarative automation conditions, evaluated by the
automation sensor (definitions.py), instead of one schedule per job.

An idle instance does no work (DESIGN.md, memory rule 5). An asset that only digests new input runs
at its cadence's tick only if a dependency updated since it last ran. Work that follows from time
passing (an idle channel's compaction, decay and pruning, eviction of aged facts, BOOTSTRAP.md's
clock-dependent lines) still runs at its ticks after the input stops, but only for a bounded while.
"""

from functools import reduce
from operator import or_

from dagster import AutomationCondition

# Every cadence ticks at minute 50 (UTC), so the assets due on one tick share one run, upstream
# first: the 6-hourly extraction lands in the same run as the bulletin that reads it.
HOURLY = "50 * * * *"
EVERY_6_HOURS = "50 */6 * * *"  # seed 000's extraction cadence
DAILY = "50 3 * * *"
WEEKLY = "50 3 * * 0"

# Resets for `after_input`, in pairs half a period apart (see there).
WITHIN_3_TO_6_HOURS = ("0 0,6,12,18 * * *", "0 3,9,15,21 * * *")
WITHIN_3_TO_7_DAYS = ("0 0 * * 1", "0 0 * * 4")
WITHIN_1_TO_2_MONTHS = ("0 0 1 1,3,5,7,9,11 *", "0 0 1 2,4,6,8,10,12 *")
WITHIN_3_TO_6_MONTHS = ("0 0 1 1,7 *", "0 0 1 4,10 *")


def on_new_input(cron: str) -> AutomationCondition:
    """At a tick of `cron`, if a dependency updated since this asset last ran (or is requested on
    the same tick, so both go in one run)."""
    return (
        AutomationCondition.cron_tick_passed(cron)
        & AutomationCondition.any_deps_updated().since_last_handled()
        & ~AutomationCondition.in_progress()
    ).with_label(f"on_new_input({cron})")


def after_input(cron: str, resets: tuple[str, ...]) -> AutomationCondition:
    """At every tick of `cron` while a dependency has updated since the latest tick of one of
    `resets`. Two resets half a period apart keep it firing for at least half a period after the
    last update and at most a whole one: long enough for time-driven work, never forever."""
    recent = reduce(
        or_,
        (
            AutomationCondition.any_deps_match(
                AutomationCondition.newly_updated().since(AutomationCondition.cron_tick_passed(reset))
                | AutomationCondition.will_be_requested()
            )
            for reset in resets
        ),
    )
    return (
        AutomationCondition.cron_tick_passed(cron)
        & recent
        & ~AutomationCondition.in_progress()
    ).with_label(f"after_input({cron})")
