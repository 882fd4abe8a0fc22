"""What `deploy/` ships, read for the tests and the real Prometheus run
(`interop.prometheus.run`): the alert rules, the dashboard's panel queries, the metric
names a PromQL expression reads, and the names a proxy's `/metrics` exports."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DASHBOARD",
    "DEPLOY",
    "RULES",
    "RULE_TESTS",
    "SCRAPE_EXAMPLE",
    "Query",
    "alert_rules",
    "concrete",
    "dashboard",
    "dashboard_queries",
    "exported_names",
    "lowered",
    "metric_names",
]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "lockgate.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "lockgate.rules.test.yml"
SCRAPE_EXAMPLE = DEPLOY / "prometheus" / "prometheus.example.yml"
DASHBOARD = DEPLOY / "grafana" / "lockgate-dashboard.json"


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL expression `deploy/` ships: where (a panel's title and target, or an
    alert's name) and the expression as written."""

    where: str
    expr: str


def alert_rules() -> list[dict[str, Any]]:
    """Every alerting rule of `lockgate.rules.yml`, in order."""
    loaded = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in loaded["groups"] for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def dashboard_queries() -> list[Query]:
    """Every panel target's expression, named `panel title [refId]`."""
    return [
        Query(f"{panel['title']} [{target['refId']}]", target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


# PromQL's words that are no metric: aggregations and their modifiers, set and comparison
# operators, the `offset` and `@` modifiers' words. A function is a name followed by `(`.
_KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "start",
        "end",
        "inf",
        "nan",
    }
)
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` reads: what is left once strings, label matchers, ranges
    and the label lists of `by`, `on` and the like are taken out, that is no function
    (a name before `(`), keyword or number."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text, flags=re.I
    )
    names: set[str] = set()
    for found in _NAME.finditer(text):
        name = found.group(0)
        rest = text[found.end() :].lstrip()
        if rest.startswith("(") or name.lower() in _KEYWORDS:
            continue
        if found.start() > 0 and (
            text[found.start() - 1].isdigit() or text[found.start() - 1] == "."
        ):
            continue  # a number's exponent or unit (`1e3`, `5m`)
        names.add(name)
    return names


def exported_names(exposition: str) -> set[str]:
    """The sample names a `/metrics` page exports, from its `# TYPE` lines (so a labelled
    family with no sample yet counts too): a counter's `_total`, a histogram's `_bucket`,
    `_count` and `_sum`, a gauge's own name."""
    names: set[str] = set()
    for line in exposition.splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[:2] != ["#", "TYPE"]:
            continue
        name, kind = parts[2], parts[3]
        if kind == "counter":
            names.add(name if name.endswith("_total") else f"{name}_total")
        elif kind == "histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_count", "_sum"))
        else:
            names.add(name)
    return names


def concrete(expr: str, *, interval: str = "1m") -> str:
    """A dashboard expression as Grafana sends it with every route chosen: `$route` is
    `.*`, `$__rate_interval` is `interval`."""
    return expr.replace("$__rate_interval", interval).replace("$route", ".*")


_COMPARISON = re.compile(
    r"(==|!=|>=|<=|>|<)\s*(bool\s+)?-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?(?![\w.])"
)


def lowered(expr: str) -> str:
    """An alert's expression with every comparison against a number made `>= 0`, so that
    it returns the series it would judge, whatever their values (every series here is a
    count, a rate, a ratio or a 0/1 gauge: never negative)."""
    return _COMPARISON.sub(">= 0", expr)
