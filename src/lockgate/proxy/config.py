"""`lockgate proxy --config FILE`: one proxy process for several providers.

The file is YAML (a mapping; no anchors or aliases, no tags beyond YAML's own; at most 1 MiB
and 32 levels of nesting). Every key is known, every value checked; an error is one line
naming the file, the line and the key: `proxy.yaml:12: routes[1].key.header: must be one of
authorization, x-api-key, api-key, x-goog-api-key`. `load_settings` reads it;
`settings_from_flags` makes the same settings from the one-route flags (`--upstream URL` and
the rest: the shorthand); `describe` says what a config means, one line per fact, without a
secret (`--check`).

```yaml
listen: {host: 127.0.0.1, port: 8787}
client_token: {env: LOCKGATE_CLIENT_TOKEN}   # or {file: /run/secrets/token}
routes:
  - name: anthropic                # the route's name: in logs and metrics
    prefix: /anthropic             # stripped before forwarding ("" or absent: every path)
    upstream: https://api.anthropic.com
    key: {env: ANTHROPIC_API_KEY}  # the proxy holds the key; {file: PATH} reads a file
    retries: {attempts: 2, max_wait: 20}
    fallbacks:
      - {upstream: https://backup.example, key: {env: BACKUP_KEY}, model: claude-x}
```

Routes match by the longest prefix, on a segment boundary (`/anthropic` matches
`/anthropic/v1/messages`, not `/anthropicx`); a request no route matches is answered 404.
"""

from __future__ import annotations

from .config_file import MAX_CONFIG_BYTES as MAX_CONFIG_BYTES
from .config_file import MAX_CONFIG_DEPTH as MAX_CONFIG_DEPTH
from .config_file import load_settings, settings_from_text
from .settings import (
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_MAX_HELD_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_STREAMS,
    KEY_HEADERS,
    ConfigError,
    KeyHeader,
    ProxyConfig,
    ProxySettings,
    RouteRetries,
    RouteSettings,
    SecretSource,
    UpstreamSettings,
    listen_problem,
    resolve_secrets,
    upstream_problem,
)
from .settings import (
    MAX_SECRET_FILE_BYTES as MAX_SECRET_FILE_BYTES,
)

__all__ = [
    "DEFAULT_HEAD_TIMEOUT",
    "DEFAULT_MAX_HELD_BYTES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_STREAMS",
    "KEY_HEADERS",
    "ConfigError",
    "KeyHeader",
    "ProxyConfig",
    "ProxySettings",
    "RouteRetries",
    "RouteSettings",
    "SecretSource",
    "UpstreamSettings",
    "describe",
    "key_warnings",
    "listen_problem",
    "load_settings",
    "resolve_secrets",
    "settings_from_text",
    "upstream_problem",
]

# --- saying what it means ---------------------------------------------------------------------


def describe(settings: ProxySettings) -> list[str]:
    """The effective settings, one line each, never a secret (`lockgate proxy --check`)."""
    lines = [
        f"listen {settings.host}:{settings.port}"
        + (" (beyond loopback allowed)" if settings.allow_remote else ""),
        "client token: "
        + (settings.client_token.describe() if settings.client_token else "none required"),
        f"bounds: {settings.max_streams} requests at once, request bodies up to "
        f"{settings.max_request_bytes} bytes, {settings.max_held_bytes} bytes held in all, "
        f"request heads within {settings.head_timeout:g} s, {settings.grace_seconds:g} s to "
        "drain",
        "metrics: " + ("/metrics" if settings.metrics else "off") + "; health: /healthz, /readyz",
    ]
    if settings.allow_hosts:
        lines.append("host names allowed: " + ", ".join(settings.allow_hosts))
    if settings.record is not None:
        lines.append(f"recording: every exchange as a cassette in {settings.record}")
    for route in settings.routes:
        gating = route.gating
        lines.append(
            f"route {route.name}: {route.prefix or '/'} -> {_upstream_line(route.upstream)}; "
            f"hold {gating.hold}, schemas {'' if gating.validate_schemas else 'not '}validated, "
            f"silence {gating.idle_timeout:g} s, deadline {gating.deadline:g} s, "
            f"keep-alive {gating.keepalive_interval:g} s, at most {gating.limits.max_calls} calls; "
            f"retries {route.retries.attempts} (waits up to {route.retries.max_wait:g} s)"
        )
        for number, fallback in enumerate(route.fallbacks, 1):
            lines.append(f"route {route.name}: fall-back {number} -> {_upstream_line(fallback)}")
    lines.extend(key_warnings(settings))
    return lines


def key_warnings(settings: ProxySettings) -> list[str]:
    """One line per route where some upstreams hold a key and others do not (`--check`
    prints them, and the proxy says them when it starts): the client's own credentials go
    to those that hold none, so there the client token is accepted only in
    `x-lockgate-token`, never as the client's API key."""
    lines = []
    for route in settings.routes:
        upstreams = (route.upstream, *route.fallbacks)
        keyless = [
            "its upstream" if index == 0 else f"fall-back {index}"
            for index, upstream in enumerate(upstreams)
            if upstream.key is None
        ]
        if keyless and len(keyless) < len(upstreams):
            line = (
                f"warning: route {route.name}: {' and '.join(keyless)} "
                f"{'holds' if len(keyless) == 1 else 'hold'} no key while another upstream "
                "of the route does: the client's own credentials go there"
            )
            if settings.client_token is not None:
                line += (
                    ", so clients must show the client token in x-lockgate-token (as their "
                    "API key it is refused)"
                )
            lines.append(line)
    return lines


def _upstream_line(upstream: UpstreamSettings) -> str:
    parts = [upstream.url]
    if upstream.key is not None:
        parts.append(f"key from {upstream.key.describe()} as {upstream.key_header}")
    else:
        parts.append("the client's own credentials")
    if upstream.model is not None:
        parts.append(f"model {upstream.model}")
    return ", ".join(parts)
