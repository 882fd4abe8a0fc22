"""Fixtures of the provider tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..helpers import serving_repair


@pytest.fixture
def served_repair(request: pytest.FixtureRequest) -> Iterator[str]:
    """`lockgate serve --provider P --scenario repair` in a subprocess, P the provider whose
    folder the test is in (tests/providers/P/): its base URL."""
    provider = request.module.__name__.split(".")[-2]
    with serving_repair(provider) as base_url:
        yield base_url
