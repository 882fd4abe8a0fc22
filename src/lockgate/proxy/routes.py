"""Which protocol a request speaks, from its method, path and query: what the proxy and the
gating transport route by. Each provider's gateway says which requests are its own
(`Gateway.target`): `POST …/responses` is OpenAI Responses, `POST …/chat/completions` is
Chat Completions, `POST …/messages` (and Vertex AI's `…:streamRawPredict`, `…:rawPredict`)
is Anthropic Messages, `POST …/models/{model}:streamGenerateContent` (and
`:generateContent`, on the Gemini API and Vertex AI) is Gemini, whatever prefix comes
before (`/v1`, a gateway's own); anything else (another path, another method) is no protocol
request and passes to the upstream unchanged.

The proxy routes a path in its plain form (`plain_path`): percent-escapes of unreserved
characters and of `:` decoded, as every server decodes them, so that
`/v1/chat/complet%69ons` and `/v1beta/models/x%3AstreamGenerateContent` are gated as the
routes they are. A path the upstream could route differently from the proxy (an
encoded `/` or `\\`, a dot segment, an empty segment, a `;`, a gated route in other
letter case) is refused instead (`PathProblem`). Two more rules decide what the proxy serves
at all: the key it holds goes only with model requests, model listings and token counts
(`takes_held_key`), and a request a protocol says cannot be gated (a resumed Responses
stream, whose request's tools the proxy never saw) is refused (`ungateable`). A protocol's
control-plane reads its clients send to their one base URL (`ControlPlane`: Bedrock's
`GET /inference-profiles…`, which Claude Code sends to `ANTHROPIC_BEDROCK_BASE_URL`) pass
ungated, with the held key, to the control plane's host (`control_plane_base`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from ..gateway import Gateway, ProtocolTarget
from ..providers import PROVIDERS
from ..providers.base import Provider

__all__ = [
    "ControlPlane",
    "PathProblem",
    "Routed",
    "control_plane_base",
    "gated_endings",
    "owner",
    "plain_path",
    "route",
    "takes_held_key",
    "ungateable",
]


@dataclass(frozen=True, slots=True)
class Routed:
    """A protocol request: the provider it is gated with, its gateway, and what its path
    says (`ProtocolTarget`)."""

    provider: Provider
    gateway: Gateway
    target: ProtocolTarget


def _gateways() -> list[tuple[Provider, Gateway]]:
    return [(entry, entry.gateway()) for entry in PROVIDERS.values() if entry.gateway]


def route(method: str, path: str, query: Mapping[str, str] | None = None) -> Routed | None:
    """The protocol a request is gated with (None: it passes unchanged). `path` is the
    request's path without its query (the proxy gives its plain form); `query`, the first
    value of each of its names. A target judged by another gateway (`ProtocolTarget.gateway`)
    is routed with its provider's entry whose gateway is that one (the engine and the
    proxy ask the entry)."""
    for entry, gateway in _gateways():
        target = gateway.target(method, path, query or {})
        if target is not None:
            if target.gateway is not None:  # another meaning on this protocol's wire
                return Routed(_judged_by(entry, target.gateway), target.gateway, target)
            return Routed(entry, gateway, target)
    return None


def _judged_by(entry: Provider, gateway: Gateway) -> Provider:
    """`entry` with `gateway` as its gateway."""
    return replace(entry, gateway=lambda: gateway)


def owner(path: str, headers: Mapping[str, str], query: Mapping[str, str]) -> Gateway:
    """The protocol a request that is no protocol request belongs to (`Gateway.claims`: a
    header of its own, its key's place): the form a held key and the proxy's own errors take
    for it. The registry lists OpenAI's protocols first, which claim whatever no other does:
    the others are asked first."""
    gateways = [gateway for _, gateway in _gateways()]
    for gateway in reversed(gateways):
        if gateway.claims(path, headers, query):
            return gateway
    return gateways[0]


def gated_endings() -> tuple[str, ...]:
    """How every gated protocol's paths end (`/chat/completions`, `:generateContent` …)."""
    return tuple(ending for _, gateway in _gateways() for ending in gateway.path_endings)


# --- the plain path --------------------------------------------------------------------------


@runtime_checkable
class EncodedSlashes(Protocol):
    """A gateway one of whose paths holds an encoded `/` by design (Bedrock's model id: an
    inference-profile ARN's `/`, sent as `%2F` by every AWS SDK): it says which paths."""

    def encoded_slash_allowed(self, path: str) -> bool:
        """Whether every `%2F` of `path` (a plain path) is where this protocol's target puts
        one, as one label the upstream does not route by."""
        ...


def _encoded_slash_allowed(path: str) -> bool:
    return any(
        isinstance(gateway, EncodedSlashes) and gateway.encoded_slash_allowed(path)
        for _, gateway in _gateways()
    )


class PathProblem(ValueError):
    """A request path the upstream could route differently from the proxy."""


_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Decoded too: `:` (reserved, but it means the same escaped or not inside a path segment that
# is not the first, and Google's servers decode `%3A` before routing `models/x:generateContent`:
# left escaped, a Gemini or Vertex AI request would pass ungated).
_DECODED = _UNRESERVED | {":"}
_ESCAPE = re.compile(r"%(?:[0-9A-Fa-f]{2})?")
# Escaped characters a server may decode before it routes, with a different route as result.
_ROUTING = {"/": "an encoded '/'", "\\": "an encoded '\\'", "%": "an encoded '%'"}


def plain_path(raw: str) -> str:
    """`raw` (the request target's path, as sent) with the escapes of unreserved characters
    and of `:` decoded (RFC 3986 §2.3: `%69` is `i`; `%3A` is the `:` of Gemini's
    `models/x:streamGenerateContent`) and nothing else changed; `PathProblem` for a path
    the upstream could route differently: an escape of `/`, `\\`, `%` or a control
    character, a `%` that begins no escape, a `\\` or `;`, a `.` or `..` segment (written
    plainly or escaped), an empty segment (`//`; a single trailing `/` is fine), or a
    gated route written in other letter case (`/v1/CHAT/completions`). An escaped `/` is
    kept only where a protocol's own target has one (`EncodedSlashes`: Bedrock's model
    id), and refused everywhere else."""
    if not raw.startswith("/"):
        raise PathProblem("it does not begin with '/'")
    if "\\" in raw:
        raise PathProblem("it holds a '\\'")
    if ";" in raw:
        raise PathProblem("it holds a ';'")

    slashes = False

    def decoded(match: re.Match[str]) -> str:
        nonlocal slashes
        escape = match.group()
        if len(escape) == 1:
            raise PathProblem("a '%' that begins no escape")
        char = chr(int(escape[1:], 16))
        if char in _DECODED:
            return char
        if char == "/":
            slashes = True
            return "%2F"  # kept encoded, if a protocol's target allows it (below)
        if char in _ROUTING:
            raise PathProblem(_ROUTING[char])
        if ord(char) < 0x20 or ord(char) == 0x7F:
            raise PathProblem("an encoded control character")
        return escape

    path = _ESCAPE.sub(decoded, raw) if "%" in raw else raw
    if slashes and not _encoded_slash_allowed(path):
        raise PathProblem(_ROUTING["/"])
    segments = path.split("/")[1:]
    for number, segment in enumerate(segments, 1):
        if segment in (".", ".."):
            raise PathProblem(f"a '{segment}' segment")
        if not segment and number < len(segments):
            raise PathProblem("an empty segment ('//')")
    lowered = path.rstrip("/").lower()
    for suffix in gated_endings():
        if lowered.endswith(suffix.lower()) and not path.rstrip("/").endswith(suffix):
            raise PathProblem(f"'{suffix}' in other letter case")
    return path


# --- what the proxy serves -----------------------------------------------------------------


@runtime_checkable
class ControlPlane(Protocol):
    """A gateway whose clients send control-plane reads (no model request: passed ungated)
    to the base URL of their model requests (Bedrock's inference-profile look-ups)."""

    def control_plane(self, method: str, path: str) -> bool:
        """Whether the request (its plain path, the route's prefix removed) is one."""
        ...

    def control_plane_base(self, base: str) -> str:
        """Where one goes for an upstream at `base` (the control plane's own host)."""
        ...


def _control_plane(method: str, path: str) -> ControlPlane | None:
    for _, gateway in _gateways():
        if isinstance(gateway, ControlPlane) and gateway.control_plane(method, path):
            return gateway
    return None


def control_plane_base(base: str, method: str, path: str) -> str:
    """The base URL a request goes to: a control-plane read's own host (`ControlPlane`) in
    place of the route upstream's (bedrock-runtime's → the `bedrock` control plane's), else
    `base` as it is."""
    gateway = _control_plane(method, path)
    return base if gateway is None else gateway.control_plane_base(base)


def takes_held_key(method: str, path: str) -> bool:
    """Whether the key a proxy holds may go with this request (a plain path): `GET …/models`
    or `GET …/models/{id}` (every SDK, Codex, Claude Code list models), or a `POST` to a
    path of a protocol's API that makes, counts or compacts a model request (each
    protocol's `Gateway.keyed_paths`: Anthropic's `/v1/messages`, not OpenAI's
    `/v1/threads/{id}/messages`, which only ends like it; Gemini's `:countTokens`), or a
    control-plane read a client sends to its model base URL (`ControlPlane`: Bedrock's
    inference-profile and foundation-model look-ups). Files, batches, stored responses,
    fine-tunes, threads, an organization's administration: none."""
    trimmed = path.rstrip("/")
    method = method.upper()
    if _control_plane(method, trimmed) is not None:
        return True
    if method == "GET":
        segments = trimmed.split("/")
        return segments[-1] == "models" or (len(segments) > 2 and segments[-2] == "models")
    return method == "POST" and any(
        gateway.keyed_paths.search(trimmed) is not None for _, gateway in _gateways()
    )


def ungateable(method: str, path: str, query: Mapping[str, Sequence[str]]) -> str | None:
    """Why a request the proxy would pass cannot be (a protocol's `Gateway.ungateable`:
    resuming a Responses stream, whose request's tools the proxy never saw), or None."""
    for _, gateway in _gateways():
        reason = gateway.ungateable(method, path, query)
        if reason is not None:
            return reason
    return None
