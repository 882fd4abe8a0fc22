"""`deploy/` (issue 28): the alert rules and the Grafana dashboard read only series the proxy
really exports (the names taken from a running proxy's `/metrics`, not from a list here),
every series it exports is on the dashboard, each alert is unit-tested firing and silent,
and `promtool` passes the rules and their tests where it is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from lockgate.proxy.config import ProxySettings
from lockgate.proxy.server import serving

from ..helpers import dead_port
from ..proxy.test_server_routes import request, route
from .deploy import (
    DASHBOARD,
    RULE_TESTS,
    RULES,
    SCRAPE_EXAMPLE,
    alert_rules,
    concrete,
    dashboard,
    dashboard_queries,
    exported_names,
    lowered,
    metric_names,
)

# The one series no proxy exports: Prometheus' own, per scrape target.
PROMETHEUS_OWN = frozenset({"up"})


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """The sample names a running proxy's `/metrics` exports (in-process, loopback)."""

    async def scrape() -> str:
        settings = ProxySettings((route("r", "", f"http://127.0.0.1:{dead_port()}"),))
        async with serving(settings) as running:
            status, _, text = await request("GET", running.url + "/metrics")
        assert status == 200
        return text.decode()

    import asyncio

    names = exported_names(asyncio.run(scrape()))
    assert "lockgate_proxy_requests_total" in names
    return names


def test_the_names_a_query_reads_are_found_and_those_it_does_not_are_left_out() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, route) (rate(x_seconds_bucket{route=~"$route"}'
        "[5m]))) / on (route) group_left sum(y_total offset 1h) > 1e3 and z"
    )
    assert metric_names(expr) == {"x_seconds_bucket", "y_total", "z"}
    assert exported_names("# TYPE a counter\n# TYPE b_seconds histogram\n# TYPE c gauge\n") == {
        "a_total",
        "b_seconds_bucket",
        "b_seconds_count",
        "b_seconds_sum",
        "c",
    }


def test_lowered_and_concrete_expressions_keep_every_series() -> None:
    assert lowered("sum(x) / (y > 0) > 0.8") == "sum(x) / (y >= 0) >= 0"
    assert lowered("ready == 0") == "ready >= 0"
    assert lowered('rate(x{a="1"}[5m]) > 1e3') == 'rate(x{a="1"}[5m]) >= 0'
    assert concrete('rate(x{route=~"$route"}[$__rate_interval])') == 'rate(x{route=~".*"}[1m])'


@pytest.mark.parametrize(
    "query",
    [*(rule["expr"] for rule in alert_rules()), *(query.expr for query in dashboard_queries())],
)
def test_every_query_reads_only_series_the_proxy_exports(query: str, exported: set[str]) -> None:
    names = metric_names(query)
    assert names, query
    unknown = names - exported - PROMETHEUS_OWN
    assert not unknown, f"{sorted(unknown)} in {query}"


def test_every_series_the_proxy_exports_is_on_the_dashboard(exported: set[str]) -> None:
    read = set().union(*(metric_names(query.expr) for query in dashboard_queries()))
    families = {re.sub(r"_(bucket|count|sum)$", "", name) for name in exported}
    on_the_dashboard = {re.sub(r"_(bucket|count|sum)$", "", name) for name in read}
    ours = {name for name in families if name.startswith("lockgate_proxy_")}
    assert ours - on_the_dashboard == set()


def test_every_alert_waits_says_its_severity_and_names_what_it_is_about() -> None:
    rules = alert_rules()
    assert {rule["alert"] for rule in rules} >= {
        "LockgateRefusalRateHigh",
        "LockgateUpstreamIncomplete",
        "LockgateRetriesExhausted",
        "LockgateHeldBytesNearBudget",
        "LockgateNotReady",
    }
    for rule in rules:
        assert re.fullmatch(r"\d+[smh]", str(rule["for"])), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        summary = rule["annotations"]["summary"]
        subject = "route" if "by (route)" in rule["expr"] else "instance"
        assert f"{{{{ $labels.{subject} }}}}" in summary, rule["alert"]
        # only labels that say where, and the value: never anything a request carried
        for text in rule["annotations"].values():
            assert set(re.findall(r"\$labels\.(\w+)", text)) <= {"route", "instance", "job"}


def _rule_tests() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    tests: list[dict[str, Any]] = loaded["tests"]
    return tests


def _where(labels: str) -> str | None:
    found = re.search(r'(route|instance)="([^"]*)"', labels)
    return found.group(2) if found is not None else None


@pytest.mark.parametrize("alert", [rule["alert"] for rule in alert_rules()])
def test_each_alert_is_tested_firing_on_one_series_and_silent_on_a_healthy_one(
    alert: str,
) -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for case in _rule_tests():
        checks = [c for c in case.get("alert_rule_test", []) if c["alertname"] == alert]
        if not checks:
            continue
        firing = {
            expected["exp_labels"].get("route") or expected["exp_labels"].get("instance")
            for check in checks
            for expected in check.get("exp_alerts") or []
        }
        fired |= {where for where in firing if where is not None}
        inputs = {_where(series["series"]) for series in case["input_series"]}
        silent |= {where for where in inputs if where is not None} - firing
    assert fired, f"{alert} is never tested firing"
    assert silent, f"{alert} is never tested silent on a healthy series"


def test_the_dashboard_takes_its_datasource_as_an_input_and_filters_by_route() -> None:
    board = dashboard()
    assert [item["name"] for item in board["__inputs"]] == ["DS_PROMETHEUS"]
    variables = {item["name"]: item for item in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["route"]["includeAll"] is True
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    routed = [q for q in dashboard_queries() if "route" in q.expr and "by (instance)" not in q.expr]
    for query in routed:
        assert 'route=~"$route"' in query.expr, query.where


_PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    _PROMTOOL is None,
    reason="promtool is not on PATH (Debian: apt-get install prometheus); the rules are "
    "checked with it where it is",
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert _PROMTOOL is not None
    return subprocess.run(
        [_PROMTOOL, *args],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@needs_promtool
def test_promtool_checks_the_rules_and_the_example_scrape_config() -> None:
    checked = _promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout
    config = _promtool("check", "config", SCRAPE_EXAMPLE.name)
    assert config.returncode == 0, config.stdout + config.stderr


@needs_promtool
def test_promtool_passes_the_rules_unit_tests() -> None:
    tested = _promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_dashboard_file_is_json_grafana_can_import() -> None:
    board = dashboard()
    assert board["uid"] == "lockgate-proxy"
    assert board["title"]
    assert DASHBOARD.read_text(encoding="utf-8").endswith("\n")
