"""The proxy's settings: frozen values, each checked when it is made (`ProxySettings`, its
routes and upstreams, `ProxyConfig` the one-route shorthand), where a secret comes from and
reading it (`SecretSource`, `resolve_secrets`), and where a proxy may listen
(`listen_problem`). `config_file.py` reads them from a file; `config.py` re-exports both."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ..credentials import api_key_problem, same_secret
from ..files import FileProblem, read_regular
from .access import host_name_problem
from .engine import GatingOptions

__all__ = [
    "DEFAULT_HEAD_TIMEOUT",
    "DEFAULT_MAX_HELD_BYTES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_STREAMS",
    "KEY_HEADERS",
    "MAX_RETRIES",
    "MAX_SECRET_FILE_BYTES",
    "WEBSOCKET_MODES",
    "AwsSigning",
    "ConfigError",
    "KeyHeader",
    "ProxyConfig",
    "ProxySettings",
    "RouteRetries",
    "RouteSettings",
    "SecretSource",
    "UpstreamSettings",
    "WebSocketMode",
    "listen_problem",
    "resolve_secrets",
    "upstream_problem",
]

# How a held key is sent upstream: `auto` is the protocol's own header (Anthropic's
# `x-api-key`, Gemini's `x-goog-api-key`, else `Authorization: Bearer`).
KeyHeader = Literal["auto", "authorization", "x-api-key", "api-key", "x-goog-api-key"]
KEY_HEADERS: tuple[KeyHeader, ...] = (
    "auto",
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
)
# What a WebSocket upgrade on a gated path gets: `relay` (the proxy terminates the client's
# socket, opens its own upstream and gates each response on it) or `refuse` (426: the client
# falls back to HTTP).
WebSocketMode = Literal["relay", "refuse"]
WEBSOCKET_MODES: tuple[WebSocketMode, ...] = ("relay", "refuse")
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_STREAMS = 256
DEFAULT_HEAD_TIMEOUT = 30.0  # beyond the keep-alive of every client pool measured (15 s)
# The bytes every gated stream of the process may hold at once (each stream: at most
# `GatingOptions.max_held_bytes`, 64 MiB): beyond, the stream that would go over is refused
# (transient) and the others go on.
DEFAULT_MAX_HELD_BYTES = 256 * 1024 * 1024
MAX_SECRET_FILE_BYTES = 64 * 1024
MAX_RETRIES = 10  # tries again on one upstream


class ConfigError(Exception):
    """A config that cannot be used: one line (file, line, key, what is wrong)."""


@dataclass(frozen=True, slots=True)
class SecretSource:
    """Where a secret comes from: an environment variable, a file (its first line), or a
    program that holds it (`value`: the one-route flags, a library caller). It is read once,
    when the proxy starts (`read`)."""

    env: str | None = None
    file: Path | None = None
    value: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if sum(given is not None for given in (self.env, self.file, self.value)) != 1:
            raise ValueError("a secret comes from exactly one of env, file and value")

    def describe(self) -> str:
        if self.env is not None:
            return f"env {self.env}"
        return f"file {self.file}" if self.file is not None else "the command line"

    def read(self, environ: Mapping[str, str] | None = None) -> str:
        """The secret, checked as a key is (ConfigError, never quoting it)."""
        if self.value is not None:
            value = self.value
        elif self.env is not None:
            value = (os.environ if environ is None else environ).get(self.env, "")
            if not value:
                raise ConfigError(f"{self.env} is not set")
        else:
            assert self.file is not None
            value = _read_secret_file(self.file)
        problem = api_key_problem(value)
        if problem is not None:
            raise ConfigError(f"the secret from {self.describe()}: {problem}")
        return value


def _read_secret_file(path: Path) -> str:
    try:
        data = read_regular(path, MAX_SECRET_FILE_BYTES)
    except FileProblem as exc:
        raise ConfigError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8") from None
    lines = text.splitlines()
    return lines[0] if lines else ""


@dataclass(frozen=True, slots=True)
class AwsSigning:
    """Requests to an upstream signed with AWS SigV4 (`proxy.sigv4`): its region, and the
    profile of the shared AWS files to take credentials from (None: botocore's standard
    chain)."""

    region: str
    profile: str | None = None


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    """One upstream of a route: its base URL (a request's path and query are appended), the
    key the proxy holds for it (None: the client's own credentials pass) and how it is sent,
    a model name that replaces the request's (a fall-back to another deployment), and AWS
    SigV4 signing with credentials the proxy holds (`aws`, never with a `key`)."""

    url: str
    key: SecretSource | None = None
    key_header: KeyHeader = "auto"
    model: str | None = None
    aws: AwsSigning | None = None
    # Tries again on this upstream after a one-off failure before the next is tried (None:
    # the route's `retries.attempts`).
    retries: int | None = None
    # A fall-back per model: the request's model → the model sent here (`*`: any other).
    # A request whose model is not in it skips this upstream. Empty: every request, its
    # model replaced by `model` when one is set.
    models: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.key is not None and self.aws is not None:
            raise ValueError("an upstream holds a key or signs with aws, not both")
        if self.retries is not None and not 0 <= self.retries <= MAX_RETRIES:
            raise ValueError(f"retries must be between 0 and {MAX_RETRIES}")
        if self.models and self.model is not None:
            raise ValueError("an upstream names one model or a models map, not both")

    def model_for(self, requested: str | None) -> tuple[bool, str | None]:
        """Whether this upstream takes a request for `requested`, and the model it is sent
        with (None: the request's own)."""
        if not self.models:
            return True, self.model
        mapped = dict(self.models)
        if requested is not None and requested in mapped:
            return True, mapped[requested]
        if "*" in mapped:
            return True, mapped["*"]
        return False, None

    @property
    def holds_credentials(self) -> bool:
        """Whether the proxy's own credentials go upstream (a key, or a SigV4 signature)."""
        return self.key is not None or self.aws is not None


@dataclass(frozen=True, slots=True)
class RouteRetries:
    """What a route retries: a response refused for a transient reason (429, 5xx or a reset
    at opening; a reset, cut or silence; a transient provider error; with `hold: all`, any
    refusal but the provider's own) while nothing of it has reached the client. A one-off
    failure is tried again on the same upstream, up to `attempts` more times (a fall-back:
    its own `retries`, else these), then the next upstream; silence moves to the next at
    once. A server's `retry-after` delays only a retry on the upstream that sent it, up to
    `max_wait` seconds (longer: the next upstream, or, with none, not retried, and the
    client is told not to retry either). The route's deadline bounds every attempt."""

    attempts: int = 0
    max_wait: float = 60.0  # the retry owner's own bound (`retry.RetryPolicy.max_delay`)


@dataclass(frozen=True, slots=True)
class RouteSettings:
    """One route: its name (logs and metrics), the path prefix it serves (stripped before
    forwarding), its upstream and fall-backs, how its responses are gated, its retries, and
    what a WebSocket upgrade on its gated paths gets."""

    name: str
    prefix: str
    upstream: UpstreamSettings
    gating: GatingOptions = field(default_factory=GatingOptions)
    retries: RouteRetries = field(default_factory=RouteRetries)
    fallbacks: tuple[UpstreamSettings, ...] = ()
    websocket: WebSocketMode = "relay"
    # Where a request over its model's context window goes (a 400 that says so): these in
    # turn, never the same upstream at the same size again. Empty: the 400 is the answer.
    context_fallbacks: tuple[UpstreamSettings, ...] = ()

    @property
    def upstreams(self) -> tuple[UpstreamSettings, ...]:
        """Every upstream of the route: its own, its fall-backs, its context fall-backs."""
        return (self.upstream, *self.fallbacks, *self.context_fallbacks)

    def strip(self, path: str) -> str | None:
        """The path to forward (the prefix removed), or None when the route does not serve
        `path`."""
        if not self.prefix:
            return path
        if path == self.prefix:
            return "/"
        if path.startswith(self.prefix + "/"):
            return path[len(self.prefix) :]
        return None


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """One proxy process: where it listens, who may use it, its routes and bounds."""

    routes: tuple[RouteSettings, ...]
    host: str = "127.0.0.1"
    port: int = 0
    allow_remote: bool = False
    client_token: SecretSource | None = None
    allow_hosts: tuple[str, ...] = ()
    key_on_any_path: bool = False
    max_streams: int = DEFAULT_MAX_STREAMS
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_held_bytes: int = DEFAULT_MAX_HELD_BYTES
    grace_seconds: float = 10.0
    head_timeout: float = DEFAULT_HEAD_TIMEOUT
    metrics: bool = True
    # Recording (`--record DIR`): every protocol exchange becomes a cassette in `record`,
    # the keys, the client token, the clients' credentials and each `redact` value redacted.
    record: Path | None = None
    redact: tuple[str, ...] = field(default=(), repr=False)
    source: Path | None = None  # the config file, if any

    def __post_init__(self) -> None:
        if not self.routes:
            raise ValueError("routes: at least one route is needed")
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be between 0 and 65535")
        for name in ("max_streams", "max_request_bytes", "max_held_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if not (math.isfinite(self.grace_seconds) and self.grace_seconds >= 0):
            raise ValueError("grace_seconds must be a non-negative number of seconds")
        if not (math.isfinite(self.head_timeout) and self.head_timeout > 0):
            raise ValueError("head_timeout must be a positive number of seconds")
        for name in self.allow_hosts:
            if (problem := host_name_problem(name)) is not None:
                raise ValueError(f"allow_hosts: {problem}")

    def route(self, path: str) -> tuple[RouteSettings, str] | None:
        """The route serving `path` (the longest prefix) and the path to forward."""
        best: tuple[RouteSettings, str] | None = None
        for candidate in self.routes:
            stripped = candidate.strip(path)
            if stripped is not None and (
                best is None or len(candidate.prefix) > len(best[0].prefix)
            ):
                best = (candidate, stripped)
        return best

    @property
    def holds_keys(self) -> bool:
        return any(
            upstream.holds_credentials for route in self.routes for upstream in route.upstreams
        )


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """One proxy in front of one upstream: the one-route shorthand of `ProxySettings` (the
    command line's flags, `LOCKGATE_*` under gunicorn, a library caller). The upstream
    (`https://api.openai.com`; a request's plain path and query are appended), where it
    listens, how streams are judged, the key it holds (it replaces the client's credentials
    upstream) and where it may go, the token every client must show, the host names clients
    may reach it by besides IP literals and `localhost`, and its bounds."""

    upstream: str
    host: str = "127.0.0.1"
    port: int = 0
    gating: GatingOptions = field(default_factory=GatingOptions)
    api_key: str | None = field(default=None, repr=False)
    client_token: str | None = field(default=None, repr=False)
    max_streams: int = DEFAULT_MAX_STREAMS
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    grace_seconds: float = 10.0
    record: Path | None = None
    redact: tuple[str, ...] = field(default=(), repr=False)
    allow_hosts: tuple[str, ...] = ()
    key_on_any_path: bool = False
    head_timeout: float = DEFAULT_HEAD_TIMEOUT
    max_held_bytes: int = DEFAULT_MAX_HELD_BYTES
    retries: RouteRetries = field(default_factory=RouteRetries)
    metrics: bool = True
    websocket: WebSocketMode = "relay"

    def __post_init__(self) -> None:
        problem = upstream_problem(self.upstream)
        if problem is not None:
            raise ValueError(f"upstream: {problem}")
        for name, secret in (("api_key", self.api_key), ("client_token", self.client_token)):
            if secret is not None and (problem := api_key_problem(secret)) is not None:
                raise ValueError(f"{name}: {problem}")
        key, token = self.api_key, self.client_token
        if key is not None and token is not None and same_secret(key, token):
            raise ValueError(f"client_token: {_TOKEN_IS_KEY} default holds")
        self.settings()  # every other bound, checked where the settings check it

    def settings(self) -> ProxySettings:
        """The same proxy as `ProxySettings`: one route, named `default`, for every path."""
        key = SecretSource(value=self.api_key) if self.api_key is not None else None
        token = SecretSource(value=self.client_token) if self.client_token is not None else None
        route = RouteSettings(
            "default",
            "",
            UpstreamSettings(self.upstream, key),
            self.gating,
            self.retries,
            websocket=self.websocket,
        )
        return ProxySettings(
            (route,),
            self.host,
            self.port,
            allow_remote=True,  # the command line checked where it may listen
            client_token=token,
            allow_hosts=self.allow_hosts,
            key_on_any_path=self.key_on_any_path,
            max_streams=self.max_streams,
            max_request_bytes=self.max_request_bytes,
            max_held_bytes=self.max_held_bytes,
            grace_seconds=self.grace_seconds,
            head_timeout=self.head_timeout,
            metrics=self.metrics,
            record=self.record,
            redact=self.redact,
        )


def upstream_problem(text: str) -> str | None:
    """None for an upstream URL the proxy can use: http(s), a host, no `user:password@`, no
    query or fragment (the request's own are appended); else a one-line reason."""
    from ..transport import base_url_problem

    problem = base_url_problem(text)
    if problem is None and ("?" in text or "#" in text):
        return "the upstream URL must not carry a query or a fragment"
    return problem


def resolve_secrets(
    settings: ProxySettings, environ: Mapping[str, str] | None = None
) -> tuple[ProxySettings, list[str], list[str]]:
    """The settings with every secret read (each source a `value` now), the secrets, and
    the environment variables they came from (for the caller to forget). ConfigError (one
    line, never quoting a secret) for one that cannot be read."""
    values: list[str] = []
    variables: list[str] = []

    def read(source: SecretSource | None, where: str) -> SecretSource | None:
        if source is None:
            return None
        try:
            value = source.read(environ)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        values.append(value)
        if source.env is not None:
            variables.append(source.env)
        return SecretSource(value=value)

    routes = []
    for route in settings.routes:
        upstreams = [
            replace(upstream, key=read(upstream.key, f"route {route.name}: key"))
            for upstream in route.upstreams
        ]
        ordinary = 1 + len(route.fallbacks)
        routes.append(
            replace(
                route,
                upstream=upstreams[0],
                fallbacks=tuple(upstreams[1:ordinary]),
                context_fallbacks=tuple(upstreams[ordinary:]),
            )
        )
    token = read(settings.client_token, "client_token")
    if token is not None and token.value is not None:
        for route in routes:
            for upstream in route.upstreams:
                key = upstream.key.value if upstream.key is not None else None
                if key is not None and same_secret(token.value, key):
                    raise ConfigError(f"client_token: {_TOKEN_IS_KEY} {route.name} holds")
    return replace(settings, routes=tuple(routes), client_token=token), values, variables


# A client token equal to a held key: every client would hold the provider's key.
_TOKEN_IS_KEY = (
    "clients would hold the provider's key: give them a token of their own, not the key route"
)


def listen_problem(settings: ProxySettings) -> str | None:
    """Why a proxy may not listen where its settings say (None: it may): beyond loopback
    only with `allow_remote`, and then with a client token when it holds a key (or it
    would be an open relay with the key)."""
    import ipaddress

    address = "127.0.0.1" if settings.host == "localhost" else settings.host
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    if not settings.allow_remote:
        return f"listen.host {settings.host} is not a loopback address: set allow_remote: true"
    if settings.holds_keys and settings.client_token is None:
        return "a proxy that holds a key and listens beyond loopback needs a client_token"
    return None
