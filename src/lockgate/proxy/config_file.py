"""Reading a config file (`lockgate proxy --config FILE`): the YAML parsed with its bounds
(1 MiB, 32 levels, no anchors or aliases), every key known and every value checked, into
`ProxySettings`; each error one line naming the file, the line and the key. The format is
described in `config.py`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from ..credentials import key_variable_problem
from ..files import FileProblem, read_regular
from ..gate import GateLimits
from .access import host_name_problem
from .engine import HOLDS, GatingOptions, Hold
from .settings import (
    KEY_HEADERS,
    MAX_RETRIES,
    WEBSOCKET_MODES,
    AwsSigning,
    ConfigError,
    KeyHeader,
    ProxySettings,
    RouteRetries,
    RouteSettings,
    SecretSource,
    UpstreamSettings,
    WebSocketMode,
    upstream_problem,
)

__all__ = ["MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH", "load_settings", "settings_from_text"]

MAX_CONFIG_BYTES = 1024 * 1024
# A config is 5 levels deep at most (routes[].fallbacks[].key.env); deeper is refused while
# parsing, before PyYAML's scanner (whose cost grows with the square of the nesting) and its
# recursive composer (RecursionError) get far.
MAX_CONFIG_DEPTH = 32
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_TEXT = re.compile(r"[A-Za-z0-9_.@+=,-]{1,128}")
_PREFIX = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@-]+)+")


class _Node:
    """A YAML value with where it is: its line (1-based) and its key path."""

    __slots__ = ("line", "path", "value")

    def __init__(self, value: object, line: int, path: str) -> None:
        self.value = value
        self.line = line
        self.path = path


T = TypeVar("T")


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, node: _Node, message: str) -> ConfigError:
        where = f"{node.path}: " if node.path else ""
        return ConfigError(f"{self.source}:{node.line}: {where}{message}")

    def mapping(self, node: _Node, known: Sequence[str] | None) -> dict[str, _Node]:
        """A mapping whose keys are `known` (None: any key)."""
        if not isinstance(node.value, dict):
            raise self.error(node, "must be a mapping")
        entries: dict[str, _Node] = node.value
        for key, child in entries.items():
            if known is not None and key not in known:
                raise self.error(child, f"unknown key (known: {', '.join(known)})")
        return entries

    def sequence(self, node: _Node) -> list[_Node]:
        if not isinstance(node.value, list):
            raise self.error(node, "must be a list")
        return list(node.value)

    def string(self, node: _Node) -> str:
        if not isinstance(node.value, str):
            raise self.error(node, "must be a string")
        return node.value

    def boolean(self, node: _Node) -> bool:
        if not isinstance(node.value, bool):
            raise self.error(node, "must be true or false")
        return node.value

    def whole(self, node: _Node, low: int, high: int | None = None) -> int:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(node, "must be a whole number")
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise self.error(node, f"must be {bound}")
        return value

    def seconds(self, node: _Node, *, positive: bool = True) -> float:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(node, "must be a number of seconds")
        number = float(value)
        if not math.isfinite(number) or number < 0 or (positive and number == 0):
            raise self.error(node, "must be a positive number of seconds")
        return number

    def check(self, node: _Node, problem: str | None) -> None:
        if problem is not None:
            raise self.error(node, problem)


def _compose(text: str, source: str) -> _Node:
    """The document as `_Node`s (mappings keyed by their string keys)."""
    import yaml

    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = event.start_mark.line + 1 if event.start_mark else 0
            if isinstance(event, yaml.AliasEvent):
                raise ConfigError(f"{source}:{line}: anchors and aliases are not allowed")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_CONFIG_DEPTH:  # before the parser's cost grows with it
                    raise ConfigError(
                        f"{source}:{line}: nested more than {MAX_CONFIG_DEPTH} levels deep"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(f"{source}:{line}: {problem}") from None
    if root is None:
        raise ConfigError(f"{source}:1: the file is empty")
    constructor = yaml.SafeLoader("")

    def convert(node: yaml.Node, path: str) -> _Node:
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            entries: dict[str, _Node] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise ConfigError(
                        f"{source}:{key_node.start_mark.line + 1}: a key must be text"
                    )
                key = str(key_node.value)
                child_path = f"{path}.{key}" if path else key
                if key in entries:
                    raise ConfigError(
                        f"{source}:{key_node.start_mark.line + 1}: {child_path}: given twice"
                    )
                entries[key] = convert(value_node, child_path)
            return _Node(entries, line, path)
        if isinstance(node, yaml.SequenceNode):
            return _Node(
                [convert(item, f"{path}[{index}]") for index, item in enumerate(node.value)],
                line,
                path,
            )
        try:
            value = constructor.construct_object(node, deep=True)
        except yaml.YAMLError:
            raise ConfigError(f"{source}:{line}: {path}: not a value lockgate reads") from None
        return _Node(value, line, path)

    return convert(root, "")


_TOP = (
    "listen",
    "allow_remote",
    "client_token",
    "allow_hosts",
    "key_on_any_path",
    "max_streams",
    "max_request_bytes",
    "max_held_bytes",
    "grace_seconds",
    "head_timeout",
    "metrics",
    "routes",
)
_ROUTE = (
    "name",
    "prefix",
    "upstream",
    "key",
    "aws",
    "model",
    "hold",
    "validate_schemas",
    "idle_timeout",
    "deadline",
    "keepalive",
    "max_held_bytes",
    "limits",
    "retries",
    "fallbacks",
    "context_fallbacks",
    "websocket",
    "first_byte_timeout",
)
_LIMITS = tuple(GateLimits.__dataclass_fields__)
_KEY = ("env", "file", "header")
_FALLBACK = ("upstream", "key", "aws", "model", "models", "retries")
_AWS = ("region", "profile")
_REGION = re.compile(r"[a-z]{2}(?:-[a-z0-9]+)+-[0-9]+")


def load_settings(path: Path) -> ProxySettings:
    """The settings a config file describes (ConfigError: one line)."""
    source = str(path)
    try:
        data = read_regular(path, MAX_CONFIG_BYTES)
    except FileProblem as exc:
        raise ConfigError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{source}:{line}: not UTF-8") from None
    return settings_from_text(text, source, path)


def settings_from_text(text: str, source: str, path: Path | None = None) -> ProxySettings:
    reader = _Reader(source)
    root = _compose(text, source)
    top = reader.mapping(root, _TOP)
    settings: dict[str, Any] = {"source": path}
    if "listen" in top:
        listen = reader.mapping(top["listen"], ("host", "port"))
        if "host" in listen:
            settings["host"] = reader.string(listen["host"])
        if "port" in listen:
            settings["port"] = reader.whole(listen["port"], 0, 65535)
    if "allow_remote" in top:
        settings["allow_remote"] = reader.boolean(top["allow_remote"])
    if "client_token" in top:
        settings["client_token"] = _secret(reader, top["client_token"], with_header=False)[0]
    if "allow_hosts" in top:
        hosts = []
        for item in reader.sequence(top["allow_hosts"]):
            host = reader.string(item).lower()
            reader.check(item, None if host_name_problem(host) is None else "not a host name")
            hosts.append(host)
        settings["allow_hosts"] = tuple(hosts)
    for key in ("max_streams", "max_request_bytes", "max_held_bytes"):
        if key in top:
            settings[key] = reader.whole(top[key], 1)
    if "key_on_any_path" in top:
        settings["key_on_any_path"] = reader.boolean(top["key_on_any_path"])
    if "grace_seconds" in top:
        settings["grace_seconds"] = reader.seconds(top["grace_seconds"], positive=False)
    if "head_timeout" in top:
        settings["head_timeout"] = reader.seconds(top["head_timeout"])
    if "metrics" in top:
        settings["metrics"] = reader.boolean(top["metrics"])
    if "routes" not in top:
        raise reader.error(root, "routes: at least one route is needed")
    entries = reader.sequence(top["routes"])
    if not entries:
        raise reader.error(top["routes"], "at least one route is needed")
    routes = [_route(reader, entry, len(entries)) for entry in entries]
    names: set[str] = set()
    prefixes: set[str] = set()
    for route, entry in zip(routes, entries, strict=True):
        if route.name in names:
            raise reader.error(entry, f"the route name {route.name!r} is used twice")
        if route.prefix in prefixes:
            raise reader.error(entry, f"the prefix {route.prefix!r} is used twice")
        names.add(route.name)
        prefixes.add(route.prefix)
    settings["routes"] = tuple(routes)
    try:
        return ProxySettings(**settings)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _secret(reader: _Reader, node: _Node, *, with_header: bool) -> tuple[SecretSource, KeyHeader]:
    entries = reader.mapping(node, _KEY if with_header else ("env", "file"))
    header: KeyHeader = "auto"
    if "header" in entries:
        given = reader.string(entries["header"]).lower()
        if given not in KEY_HEADERS:
            raise reader.error(entries["header"], f"must be one of {', '.join(KEY_HEADERS)}")
        header = KEY_HEADERS[KEY_HEADERS.index(given)]
    if ("env" in entries) == ("file" in entries):
        raise reader.error(node, "give exactly one of env and file")
    if "env" in entries:
        name = reader.string(entries["env"])
        reader.check(entries["env"], None if _VARIABLE.fullmatch(name) else "not a variable name")
        reader.check(entries["env"], key_variable_problem(name))
        return SecretSource(env=name), header
    file = reader.string(entries["file"])
    return SecretSource(file=Path(file)), header


def _upstream(
    reader: _Reader, entries: Mapping[str, _Node], *, fallback: bool = False
) -> UpstreamSettings:
    """A route's upstream or one of its fall-backs: `upstream`, `key` or `aws`, `model`; a
    fall-back's `models` and `retries`."""
    key: SecretSource | None = None
    header: KeyHeader = "auto"
    if "key" in entries:
        key, header = _secret(reader, entries["key"], with_header=True)
    aws: AwsSigning | None = None
    if "aws" in entries:
        if key is not None:
            raise reader.error(entries["aws"], "give key or aws, not both")
        aws = _aws(reader, entries["aws"])
    url = reader.string(entries["upstream"])
    reader.check(entries["upstream"], upstream_problem(url))
    model = reader.string(entries["model"]) if "model" in entries else None
    if not fallback:
        return UpstreamSettings(url, key, header, model, aws)
    retries = reader.whole(entries["retries"], 0, MAX_RETRIES) if "retries" in entries else None
    models: list[tuple[str, str]] = []
    if "models" in entries:
        if model is not None:
            raise reader.error(entries["models"], "give model or models, not both")
        given = reader.mapping(entries["models"], None)
        for requested, node in given.items():
            models.append((requested, reader.string(node)))
        if not models:
            raise reader.error(entries["models"], "name at least one model (or `*`)")
    return UpstreamSettings(url, key, header, model, aws, retries, tuple(models))


def _aws(reader: _Reader, node: _Node) -> AwsSigning:
    """`aws: {region, profile}`: SigV4 signing with botocore's credentials."""
    from .sigv4 import aws_problem

    entries = reader.mapping(node, _AWS)
    if "region" not in entries:
        raise reader.error(node, "region is required")
    region = reader.string(entries["region"])
    reader.check(entries["region"], None if _REGION.fullmatch(region) else "not an AWS region")
    profile = None
    if "profile" in entries:
        profile = reader.string(entries["profile"])
        reader.check(
            entries["profile"], None if _NAME_TEXT.fullmatch(profile) else "not a profile name"
        )
    reader.check(node, aws_problem())
    return AwsSigning(region, profile)


def _route(reader: _Reader, node: _Node, count: int) -> RouteSettings:
    entries = reader.mapping(node, _ROUTE)
    for required in ("name", "upstream"):
        if required not in entries:
            raise reader.error(node, f"{required} is required")
    name = reader.string(entries["name"])
    reader.check(
        entries["name"],
        None if _NAME.fullmatch(name) else "lower-case letters, digits, - and _ (up to 63)",
    )
    prefix = ""
    if "prefix" in entries:
        prefix = reader.string(entries["prefix"]).rstrip("/")
        if prefix and (_PREFIX.fullmatch(prefix) is None or "/." in prefix):
            raise reader.error(entries["prefix"], "must be a path like /openai (or empty)")
    if not prefix and count > 1:
        raise reader.error(node, "with several routes every route needs its own prefix")
    upstream = _upstream(reader, entries)
    gating = _gating(reader, entries)
    retries = RouteRetries()
    if "retries" in entries:
        given = reader.mapping(entries["retries"], ("attempts", "max_wait"))
        if "attempts" in given:
            retries = replace(retries, attempts=reader.whole(given["attempts"], 0, 10))
        if "max_wait" in given:
            retries = replace(retries, max_wait=reader.seconds(given["max_wait"], positive=False))
    fallbacks = _fallbacks(reader, entries, "fallbacks")
    context_fallbacks = _fallbacks(reader, entries, "context_fallbacks")
    websocket: WebSocketMode = "relay"
    if "websocket" in entries:
        given_mode = reader.string(entries["websocket"])
        if given_mode not in WEBSOCKET_MODES:
            raise reader.error(entries["websocket"], f"must be one of {', '.join(WEBSOCKET_MODES)}")
        websocket = "refuse" if given_mode == "refuse" else "relay"
    return RouteSettings(
        name, prefix, upstream, gating, retries, fallbacks, websocket, context_fallbacks
    )


def _fallbacks(
    reader: _Reader, entries: Mapping[str, _Node], name: str
) -> tuple[UpstreamSettings, ...]:
    """A route's `fallbacks` or `context_fallbacks`: upstreams of the same protocol."""
    found: list[UpstreamSettings] = []
    for item in reader.sequence(entries[name]) if name in entries else ():
        fields = reader.mapping(item, _FALLBACK)
        if "upstream" not in fields:
            raise reader.error(item, "upstream is required")
        found.append(_upstream(reader, fields, fallback=True))
    return tuple(found)


def _gating(reader: _Reader, entries: Mapping[str, _Node]) -> GatingOptions:
    options: dict[str, Any] = {"validate_schemas": True}
    if "hold" in entries:
        hold = reader.string(entries["hold"])
        if hold not in HOLDS:
            raise reader.error(entries["hold"], f"must be one of {', '.join(HOLDS)}")
        options["hold"] = hold
    if "validate_schemas" in entries:
        options["validate_schemas"] = reader.boolean(entries["validate_schemas"])
    readers: dict[str, tuple[str, Callable[[_Node], object]]] = {
        "idle_timeout": ("idle_timeout", reader.seconds),
        "first_byte_timeout": ("first_byte_timeout", reader.seconds),
        "deadline": ("deadline", reader.seconds),
        "keepalive": ("keepalive_interval", reader.seconds),
        "max_held_bytes": ("max_held_bytes", lambda node: reader.whole(node, 1)),
    }
    for key, (option, read) in readers.items():
        if key in entries:
            options[option] = read(entries[key])
    if "limits" in entries:
        given = reader.mapping(entries["limits"], _LIMITS)
        options["limits"] = GateLimits(
            **{name: reader.whole(value, 1) for name, value in given.items()}
        )
    hold_value: Hold = options.pop("hold", "tools")
    return GatingOptions(hold=hold_value, **options)
