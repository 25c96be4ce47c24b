"""Asset checks that share one step per group of assets.

Dagster runs every `@asset_check` as a step of its own, and a step's events and bookkeeping cost
more CPU than any of our checks (as eleven steps they added about 4% to a one-message `cortex run`).
Grouped, each check is still its own check in the UI, with its own history, and can still be
executed alone: the step evaluates only the checks selected.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSpec,
    AssetKey,
    multi_asset_check,
)


@dataclass(frozen=True)
class Check:
    """One check: `evaluate` reads the run's resources (`.settings`, `.database`, `.vectors`)."""

    name: str
    asset: str
    description: str
    evaluate: Callable[[Any], AssetCheckResult]

    @property
    def key(self) -> AssetCheckKey:
        return AssetCheckKey(AssetKey(self.asset), self.name)


def checks_in_one_step(name: str, description: str, checks: list[Check]) -> AssetChecksDefinition:
    """One step that evaluates the selected ones of `checks`, in the order given."""

    @multi_asset_check(
        name=name,
        description=description,
        specs=[AssetCheckSpec(c.name, asset=c.asset, description=c.description) for c in checks],
        can_subset=True,
        required_resource_keys={"settings", "database", "vectors"},
    )
    def evaluate_selected(context: AssetCheckExecutionContext):
        selected = context.selected_asset_check_keys
        for check in checks:
            if check.key in selected:
                result = check.evaluate(context.resources)
                yield result._replace(asset_key=check.key.asset_key, check_name=check.name)

    return evaluate_selected
