"""Pytest fixtures for the fake Messages API.

Import into a test module or conftest (``from tests.support.fixtures import
messages_server``) or list ``"tests.support.fixtures"`` in ``pytest_plugins``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.messages_server import MessagesServer


@pytest.fixture
def messages_server() -> Iterator[MessagesServer]:
    """A started MessagesServer, closed after the test."""
    with MessagesServer() as server:
        yield server
