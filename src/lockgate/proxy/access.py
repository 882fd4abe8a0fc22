"""Who may use the proxy, and where a key it holds may go.

- **The client token** (`ProxySettings.client_token`): every request must carry it, in
  `x-lockgate-token`, or, on a route every upstream of which (its own and each fall-back)
  holds a key, wherever the client's protocol puts a key (`Authorization: Bearer TOKEN`,
  `x-api-key`, `api-key`, `x-goog-api-key`, the `key` query parameter: an SDK pointed at
  the proxy is given the token as its key). On a route with an upstream that holds no key,
  the client's credentials go to that upstream: the token is accepted only in
  `x-lockgate-token` there. Compared in constant time. Neither `x-lockgate-token` nor a
  credential equal to the token ever reaches an upstream (`without_token`,
  `upstream_query`), whichever upstream an attempt goes to.
- **A held key** goes only with what a model client needs (`routes.takes_held_key`: the
  paths of each protocol's API that make or count a model request, model listings;
  `key_on_any_path` lifts that), never with a browser's request (an `Origin`, or
  `Sec-Fetch-*` headers other than the `Sec-Fetch-Mode: cors` Node's own `fetch` sends on
  every request), and never to a `Host` that is not an IP literal, a `localhost` name or
  an allowed name (a page reached through DNS rebinding carries its own name as `Host`).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Iterable, Mapping

from multidict import CIMultiDict
from yarl import URL

from .routes import takes_held_key

__all__ = ["KEY_HEADERS", "TOKEN_HEADER", "Access", "host_name_problem", "quoted"]

TOKEN_HEADER = "x-lockgate-token"
# Where clients put an API key besides `Authorization` (Anthropic, Azure, Gemini): where a
# client may show the token, besides its own header, when the proxy holds the key.
KEY_HEADERS = ("x-api-key", "api-key", "x-goog-api-key")
_CREDENTIALS = frozenset({"authorization", *KEY_HEADERS})
_HOST_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def quoted(text: str, limit: int = 120) -> str:
    """Client or upstream text for a reason: quoted, escaped (no control character, no
    line break reaches a log), bounded."""
    shown = ascii(text[:limit])
    return shown if len(text) <= limit else shown[:-1] + "…" + shown[-1]


def host_name_problem(name: str) -> str | None:
    """None for a host name a client may reach the proxy by (`--allow-host`): DNS labels
    (letters, digits, `-`, `_`), dot-separated, a trailing dot allowed; else a reason."""
    labels = name.removesuffix(".").split(".")
    if not name or len(name) > 253 or not all(_HOST_NAME.fullmatch(label) for label in labels):
        return f"{name!a} is not a host name (letters, digits, '-' and '_' between dots)"
    return None


def _host_key(name: str) -> str:
    return name.removesuffix(".").lower()


class Access:
    """The proxy's admission rules (see the module docstring)."""

    def __init__(
        self,
        *,
        token: str | None,
        holds_key: bool,
        allow_hosts: Iterable[str] = (),
        key_on_any_path: bool = False,
    ) -> None:
        self.token = token.encode() if token else None
        self.holds_key = holds_key
        self.allowed_hosts = frozenset(_host_key(name) for name in allow_hosts)
        self.key_on_any_path = key_on_any_path

    def authorized(
        self, headers: Mapping[str, str], query: Mapping[str, str], *, as_key: bool | None = None
    ) -> bool:
        """Whether a request shows the client token (always, when none is required).
        `as_key`: whether the token may be shown as the client's own API key (the route's
        every upstream holds a key, so no credential of the client's goes upstream); None:
        whether the proxy holds any key (its own paths, never forwarded)."""
        if self.token is None:
            return True
        offered = [headers.get(TOKEN_HEADER)]
        if self.holds_key if as_key is None else as_key:
            scheme, _, value = headers.get("authorization", "").partition(" ")
            if scheme.lower() == "bearer":
                offered.append(value.strip())
            offered.extend(headers.get(name) for name in KEY_HEADERS)
            offered.append(query.get("key"))
        return any(candidate is not None and self._is_token(candidate) for candidate in offered)

    def _is_token(self, value: str) -> bool:
        """Whether `value` is the client token (constant time)."""
        assert self.token is not None
        return hmac.compare_digest(value.encode("utf-8", "surrogateescape"), self.token)

    def _shows_token(self, value: str) -> bool:
        """Whether a credential's value is the token, alone or after a scheme (`Bearer`)."""
        if self.token is None:
            return False
        _, _, rest = value.strip().partition(" ")
        return self._is_token(value.strip()) or (bool(rest) and self._is_token(rest.strip()))

    def without_token(self, headers: CIMultiDict[str]) -> CIMultiDict[str]:
        """The headers an upstream gets (`upstream.upstream_headers`' answer) without a
        credential that is the client token: an upstream that holds no key gets the
        client's credentials, never the token (with it, anyone running that upstream could
        spend every key the proxy holds)."""
        if self.token is None:
            return headers
        kept: CIMultiDict[str] = CIMultiDict()
        for name, value in headers.items():
            if name.lower() in _CREDENTIALS and self._shows_token(value):
                continue
            kept.add(name, value)
        return kept

    def upstream_query(self, url: URL, *, held: bool) -> str:
        """The query string an upstream gets: the request's as it came, without a `key`
        that is the client token, and without any `key` when the upstream is sent a key the
        proxy holds (Gemini's other place for a key: the client's, replaced)."""
        keys = url.query.getall("key", [])
        if not keys or not (held or any(self._shows_token(value) for value in keys)):
            return url.raw_query_string
        kept = [
            (name, value)
            for name, value in url.query.items()
            if name != "key" or not (held or self._shows_token(value))
        ]
        return URL("/").with_query(kept).raw_query_string

    def held_key_problem(
        self, headers: Mapping[str, str], hosts: list[str], method: str, path: str
    ) -> str | None:
        """Why the held key may not go with this request (None: it may). `hosts`: every
        `Host` header it carries; `path`: the path it is forwarded to."""
        fetch = {
            name.lower(): value
            for name, value in headers.items()
            if name.lower().startswith("sec-fetch-")
        }
        if "origin" in headers or (fetch and fetch != {"sec-fetch-mode": "cors"}):
            return "a browser request may not use the key this proxy holds"
        if len(hosts) > 1 or (hosts and not self.host_allowed(hosts[0])):
            shown = quoted(", ".join(hosts), 80)
            return (
                f"the Host {shown} is not this proxy's (an IP literal, localhost, or a name "
                "given with --allow-host NAME): a rebound name may not use the key it holds"
            )
        if not self.key_on_any_path and not takes_held_key(method, path):
            return (
                f"the key this proxy holds goes only with model requests, model listings and "
                f"token counts, not with {method} {quoted(path, 200)} "
                "(--key-on-any-path sends it with every request)"
            )
        return None

    def host_allowed(self, host: str) -> bool:
        """Whether a `Host` value is an IP literal, a `localhost` name or an allowed name
        (with or without a port)."""
        name = host.strip()
        if name.startswith("["):  # an IPv6 literal, with or without a port
            literal, closed, rest = name[1:].partition("]")
            if not closed or (rest and not rest[1:].isdigit()) or (rest and rest[0] != ":"):
                return False
            try:
                ipaddress.IPv6Address(literal)
            except ValueError:
                return False
            return True
        bare, colon, port = name.rpartition(":")
        if colon and port.isdigit():
            name = bare
        key = _host_key(name)
        try:
            ipaddress.IPv4Address(key)
        except ValueError:
            pass
        else:
            return True
        return key == "localhost" or key.endswith(".localhost") or key in self.allowed_hosts
