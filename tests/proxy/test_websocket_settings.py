"""What a route's WebSocket mode is set by and says: `LOCKGATE_WEBSOCKET` for gunicorn's
worker (`relay`, the default, or `refuse`; anything else one clear error) and the line
`lockgate proxy --check` prints for each route."""

from __future__ import annotations

import pytest

from lockgate.proxy.description import describe
from lockgate.proxy.environment import config_from_environment

UPSTREAM = {"LOCKGATE_UPSTREAM": "http://127.0.0.1:9"}


def test_the_environment_sets_the_websocket_mode() -> None:
    assert config_from_environment(UPSTREAM).websocket == "relay"
    refused = config_from_environment({**UPSTREAM, "LOCKGATE_WEBSOCKET": "refuse"})
    assert refused.websocket == "refuse"
    with pytest.raises(ValueError, match="LOCKGATE_WEBSOCKET must be relay or refuse"):
        config_from_environment({**UPSTREAM, "LOCKGATE_WEBSOCKET": "pass"})


def test_the_check_says_each_routes_websocket_mode() -> None:
    relayed = describe(config_from_environment(UPSTREAM).settings())
    refused = describe(
        config_from_environment({**UPSTREAM, "LOCKGATE_WEBSOCKET": "refuse"}).settings()
    )
    assert relayed[-1] == (
        "WebSocket upgrades (Responses): relayed on default (each response gated)"
    )
    assert refused[-1] == (
        "WebSocket upgrades (Responses): answered 426 on default (clients fall back to HTTP)"
    )
