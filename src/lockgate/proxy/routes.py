"""Which protocol a request speaks, from its method and path: what the proxy and the gating
transport route by. `POST …/responses` is OpenAI Responses, `POST …/chat/completions` is
Chat Completions, `POST …/messages` is Anthropic Messages, whatever prefix comes before
(`/v1`, a gateway's own); anything else (another path, another method) is no protocol
request and passes to the upstream unchanged.

The proxy routes a path in its plain form (`plain_path`): percent-escapes of unreserved
characters decoded, as every server decodes them, so that `/v1/chat/complet%69ons` is gated
as the Chat route it is. A path the upstream could route differently from the proxy (an
encoded `/` or `\\`, a dot segment, an empty segment, a `;`, a gated route in other
letter case) is refused instead (`PathProblem`). Two more rules decide what the proxy serves
at all: the key it holds goes only with model requests, model listings and token counts
(`takes_held_key`), and a resumed Responses stream, whose request's tools the proxy never
saw, is refused (`resumes_response_stream`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..providers import provider as get_provider
from ..providers.base import Provider

__all__ = [
    "GATED_SUFFIXES",
    "PathProblem",
    "plain_path",
    "resumes_response_stream",
    "route",
    "takes_held_key",
]

# The path ends each gated protocol has, and the provider that speaks it.
GATED_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("/chat/completions", "chat"),
    ("/responses", "responses"),
    ("/messages", "anthropic"),
)


def route(method: str, path: str) -> Provider | None:
    """The provider a request is gated with (None: it passes unchanged). `path` is the
    request's path without its query (the proxy gives its plain form)."""
    if method.upper() != "POST":
        return None
    trimmed = path.rstrip("/")
    for suffix, name in GATED_SUFFIXES:
        if trimmed.endswith(suffix):
            return get_provider(name)
    return None


# --- the plain path --------------------------------------------------------------------------


class PathProblem(ValueError):
    """A request path the upstream could route differently from the proxy."""


_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_ESCAPE = re.compile(r"%(?:[0-9A-Fa-f]{2})?")
# Escaped characters a server may decode before it routes, with a different route as result.
_ROUTING = {"/": "an encoded '/'", "\\": "an encoded '\\'", "%": "an encoded '%'"}


def plain_path(raw: str) -> str:
    """`raw` (the request target's path, as sent) with the escapes of unreserved characters
    decoded (RFC 3986 §2.3: `%69` is `i`) and nothing else changed; `PathProblem` for a path
    the upstream could route differently: an escape of `/`, `\\`, `%` or a control
    character, a `%` that begins no escape, a `\\` or `;`, a `.` or `..` segment (written
    plainly or escaped), an empty segment (`//`; a single trailing `/` is fine), or a
    gated route written in other letter case (`/v1/CHAT/completions`)."""
    if not raw.startswith("/"):
        raise PathProblem("it does not begin with '/'")
    if "\\" in raw:
        raise PathProblem("it holds a '\\'")
    if ";" in raw:
        raise PathProblem("it holds a ';'")

    def decoded(match: re.Match[str]) -> str:
        escape = match.group()
        if len(escape) == 1:
            raise PathProblem("a '%' that begins no escape")
        char = chr(int(escape[1:], 16))
        if char in _UNRESERVED:
            return char
        if char in _ROUTING:
            raise PathProblem(_ROUTING[char])
        if ord(char) < 0x20 or ord(char) == 0x7F:
            raise PathProblem("an encoded control character")
        return escape

    path = _ESCAPE.sub(decoded, raw) if "%" in raw else raw
    segments = path.split("/")[1:]
    for number, segment in enumerate(segments, 1):
        if segment in (".", ".."):
            raise PathProblem(f"a '{segment}' segment")
        if not segment and number < len(segments):
            raise PathProblem("an empty segment ('//')")
    lowered = path.rstrip("/").lower()
    for suffix, _ in GATED_SUFFIXES:
        if lowered.endswith(suffix) and not path.rstrip("/").endswith(suffix):
            raise PathProblem(f"'{suffix}' in other letter case")
    return path


# --- what the proxy serves -----------------------------------------------------------------

# Besides the gated routes, the requests the held key goes with: model listings (every SDK,
# Codex, Claude Code) and the endpoints that count or compact a model request's tokens.
_KEYED_POSTS = ("/messages/count_tokens", "/responses/input_tokens", "/responses/compact")


def takes_held_key(method: str, path: str) -> bool:
    """Whether the key a proxy holds may go with this request (a plain path): a gated
    protocol request, `GET …/models` or `GET …/models/{id}`, or a `POST` that counts or
    compacts a model request (`…/messages/count_tokens`, `…/responses/input_tokens`,
    `…/responses/compact`). Files, batches, stored responses, fine-tunes, an organization's
    administration: none."""
    if route(method, path) is not None:
        return True
    trimmed = path.rstrip("/")
    method = method.upper()
    if method == "GET":
        segments = trimmed.split("/")
        return segments[-1] == "models" or (len(segments) > 2 and segments[-2] == "models")
    return method == "POST" and trimmed.endswith(_KEYED_POSTS)


def resumes_response_stream(method: str, path: str, stream_values: Iterable[str]) -> bool:
    """Whether a request resumes a Responses stream (`GET …/responses/{id}?stream=true`,
    `starting_after` or not): its events may carry calls, and the proxy never saw the
    request that named their tools. `stream_values` are the query's `stream` values."""
    if method.upper() != "GET":
        return False
    segments = path.rstrip("/").split("/")
    if len(segments) < 3 or segments[-2] != "responses" or not segments[-1]:
        return False
    return any(value.strip().lower() not in ("", "0", "false") for value in stream_values)
