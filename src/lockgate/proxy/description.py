"""What a proxy's settings mean, one line per fact and never a secret (`lockgate proxy
--check`), and the warnings the proxy also says when it starts (`key_warnings`)."""

from __future__ import annotations

from .settings import ProxySettings, UpstreamSettings

__all__ = ["describe", "key_warnings"]


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
            + (
                f"; first byte within {gating.first_byte_timeout:g} s"
                if gating.first_byte_timeout is not None
                else ""
            )
        )
        for number, fallback in enumerate(route.fallbacks, 1):
            lines.append(f"route {route.name}: fall-back {number} -> {_upstream_line(fallback)}")
        for number, fallback in enumerate(route.context_fallbacks, 1):
            lines.append(
                f"route {route.name}: context fall-back {number} -> {_upstream_line(fallback)}"
            )
    lines.append(_websocket_line(settings))
    lines.extend(key_warnings(settings))  # the warnings last
    return lines


def key_warnings(settings: ProxySettings) -> list[str]:
    """One line per route where some upstreams hold a key and others do not (`--check`
    prints them, and the proxy says them when it starts): the client's own credentials go
    to those that hold none, so there the client token is accepted only in
    `x-lockgate-token`, never as the client's API key."""
    lines = []
    for route in settings.routes:
        upstreams = route.upstreams
        keyless = [
            "its upstream" if index == 0 else f"fall-back {index}"
            for index, upstream in enumerate(upstreams)
            if not upstream.holds_credentials
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


def _websocket_line(settings: ProxySettings) -> str:
    """Which routes relay a Responses WebSocket (each response gated) and which answer 426."""
    relayed = [route.name for route in settings.routes if route.websocket == "relay"]
    refused = [route.name for route in settings.routes if route.websocket == "refuse"]
    parts = []
    if relayed:
        parts.append(f"relayed on {', '.join(relayed)} (each response gated)")
    if refused:
        parts.append(f"answered 426 on {', '.join(refused)} (clients fall back to HTTP)")
    return "WebSocket upgrades (Responses): " + "; ".join(parts)


def _upstream_line(upstream: UpstreamSettings) -> str:
    parts = [upstream.url]
    if upstream.key is not None:
        parts.append(f"key from {upstream.key.describe()} as {upstream.key_header}")
    elif upstream.aws is not None:
        profile = upstream.aws.profile
        where = f"profile {profile}" if profile else "the standard chain"
        parts.append(f"AWS SigV4 in {upstream.aws.region}, credentials from {where}")
    else:
        parts.append("the client's own credentials")
    if upstream.model is not None:
        parts.append(f"model {upstream.model}")
    if upstream.models:
        mapped = ", ".join(f"{given} as {sent}" for given, sent in upstream.models)
        parts.append(f"only models {mapped}")
    if upstream.retries is not None:
        parts.append(f"retries {upstream.retries}")
    return ", ".join(parts)
