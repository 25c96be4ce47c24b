"""What each connector a gateway runs is doing, for `cortex status` in another process: a file per
connector in `$CORTEX_HOME/connectors/`, written as its state changes, read only while the gateway
that wrote it is alive (one refused for good had left every command saying nothing)."""

from __future__ import annotations

import json
import os
import time
from contextlib import suppress
from pathlib import Path

from cortex_pipelines.config import Paths
from cortex_pipelines.files import write_atomic
from cortex_pipelines.processes import alive


def _file(paths: Paths, name: str) -> Path:
    return paths.connectors / f"{name}.state.json"


def record_state(paths: Paths, name: str, state: str) -> None:
    """Best effort: a connector runs on whether or not its state can be written."""
    with suppress(OSError):
        record = {"state": state, "gateway_pid": os.getpid(), "at": time.time()}
        write_atomic(_file(paths, name), json.dumps(record))


def live_states(paths: Paths) -> dict[str, str]:
    """Each connector's state, as a gateway alive now recorded it."""
    states = {}
    for path in sorted(paths.connectors.glob("*.state.json")) if paths.connectors.is_dir() else []:
        with suppress(OSError, ValueError, KeyError, TypeError):
            record = json.loads(path.read_text())
            if alive(int(record["gateway_pid"]), float(record["at"])):  # a reused pid started later
                states[path.name.removesuffix(".state.json")] = str(record["state"])
    return states
