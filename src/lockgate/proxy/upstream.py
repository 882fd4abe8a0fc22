"""The proxy's side toward an upstream: the pooled session, the headers a request carries
there (the client's own credentials, or a key the proxy holds in its protocol's header), the
headers and body a client gets back (redacted of a held key), and what went wrong when no
answer came.

One `aiohttp.ClientSession` per proxy process: pooled connections (at most `max_streams`),
no redirects followed, no proxy variables (`trust_env=False`), no cookies kept, bodies
decoded (`auto_decompress`: gzip and deflate, br and zstd only with aiohttp's optional
packages, so only those are asked for). Silence is bounded on connecting and on every read
by the gate's idle timeout (plus a margin: the engine decides first); a gated stream read by
the engine (`ResumableUpstreamBody`) drops aiohttp's per-read timer once its head arrived,
the engine's one timer per stream bounding its silence instead (aiohttp re-arms a timer on
every read). A route as the proxy serves it (`RouteRuntime`: its upstreams in turn, their keys
read once) is built here too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, MultiMapping
from yarl import URL

from ..cassette.recorder import Exchange
from ..credentials import Redactor
from ..gateway import HOP_BY_HOP
from ..http import describe
from .access import KEY_HEADERS, TOKEN_HEADER, Access, quoted
from .config import RouteSettings
from .engine import forwarded_headers
from .sigv4 import AWS_CLIENT_HEADERS, AwsSigner

__all__ = [
    "CREDENTIALS",
    "READ_MARGIN_SECONDS",
    "ResumableUpstreamBody",
    "RouteRuntime",
    "UpstreamBody",
    "UpstreamRuntime",
    "client_credentials",
    "client_headers",
    "decodes",
    "failure_before_answer",
    "finish",
    "open_session",
    "route_runtime",
    "transfer_coding_problem",
    "upstream_headers",
    "upstream_name",
    "upstream_timeout",
    "upstream_url",
]

READ_MARGIN_SECONDS = 1.0  # the socket's read timeout is this much beyond the engine's own
# Request headers never sent upstream: hop-by-hop (RFC 9110 §7.6.1), those aiohttp writes
# itself (host, length, the encodings it can decode), and the proxy's own token.
_NOT_SENT = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "expect", TOKEN_HEADER}
# The client's credentials, replaced when the proxy holds the key.
CREDENTIALS = frozenset({"authorization", *KEY_HEADERS})
# The content encodings aiohttp decodes (a request's body, an upstream's answer); br and
# zstd only with their optional packages, else aiohttp refuses them.
_DECODED_ENCODINGS = frozenset({"gzip", "deflate", "br", "zstd"})


def upstream_timeout(idle_timeout: float) -> aiohttp.ClientTimeout:
    """The bounds on silence toward an upstream: on connecting, and on every read (with a
    margin: the engine decides first)."""
    return aiohttp.ClientTimeout(
        total=None, sock_connect=idle_timeout, sock_read=idle_timeout + READ_MARGIN_SECONDS
    )


def open_session(max_streams: int, idle_timeout: float) -> aiohttp.ClientSession:
    """The pooled session toward every upstream of one proxy process."""
    timeout = upstream_timeout(idle_timeout)
    connector = aiohttp.TCPConnector(limit=max_streams, limit_per_host=0)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=True,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


def upstream_url(base: str, path: str, query: Mapping[str, str] | None, raw_query: str) -> URL:
    """The upstream URL of a request: its base, the request's plain path, and its query as
    it came (`raw_query`), or rebuilt from `query` (the client's `key=` dropped)."""
    if query is not None:
        raw_query = URL("/").with_query(list(query.items())).raw_query_string
    return URL(base.rstrip("/") + path + (f"?{raw_query}" if raw_query else ""), encoded=True)


def outgoing(
    access: Access,
    request: web.Request,
    upstream: UpstreamRuntime,
    key_header: str,
    *,
    signed: bool = False,
) -> tuple[str, CIMultiDict[str]]:
    """What of a client's request goes to `upstream`, the one rule of every path that sends
    one (an attempt, the WebSocket relay): its query, and its headers (`upstream_headers`),
    this upstream's held credentials in place of the client's (a `key=` in the query too),
    the client token never, whichever upstream it is."""
    query = access.upstream_query(request.rel_url, held=upstream.holds_credentials)
    headers = access.without_token(
        upstream_headers(
            request.headers,
            request.headers.getall("connection", []),
            key=upstream.key,
            key_header=upstream.key_header or key_header,
            signed=signed,
        )
    )
    return query, headers


def upstream_headers(
    headers: Mapping[str, str],
    connection: list[str],
    *,
    key: str | None,
    key_header: str,
    signed: bool = False,
) -> CIMultiDict[str]:
    """The request's headers as the upstream gets them: hop-by-hop ones and those the
    connection names dropped, a body's encoding dropped when aiohttp decoded it, and with a
    held `key` the client's credentials replaced by it, in `key_header` (`authorization`
    as `Bearer KEY`). `signed`: the proxy signs the request with SigV4, so the client's
    credentials and its own signature's headers are dropped (the signature is added later,
    over what is sent)."""
    named = {part.strip().lower() for value in connection for part in value.split(",")}
    decoded = decodes(headers.get("content-encoding", ""))
    sent: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        lowered = name.lower()
        if lowered in _NOT_SENT or lowered in named:
            continue
        if (key is not None or signed) and lowered in CREDENTIALS:
            continue
        if signed and lowered in AWS_CLIENT_HEADERS:
            continue
        if decoded and lowered == "content-encoding":
            continue  # a body aiohttp decoded goes on decoded
        sent.add(name, value)
    if key is not None:
        sent[key_header] = f"Bearer {key}" if key_header == "authorization" else key
    return sent


def client_headers(upstream: aiohttp.ClientResponse, redactor: Redactor | None) -> CIMultiDict[str]:
    """The upstream's headers to pass on (`engine.forwarded_headers`: every value, names in
    any case), redacted of a held key (a header whose name holds it is dropped)."""
    headers = forwarded_headers(upstream.headers)
    if redactor is None:
        return headers
    return CIMultiDict(
        (name, redactor(value)) for name, value in headers.items() if redactor(name) == name
    )


def client_credentials(headers: MultiMapping[str], keys: list[str]) -> list[str]:
    """The credentials a client sent (its key, a token, cookies, a `key` query parameter:
    `keys`): redacted from the exchange's cassette, as a held key is."""
    values: list[str] = []
    for name in (*CREDENTIALS, TOKEN_HEADER, "proxy-authorization", "cookie"):
        for value in headers.getall(name, []):
            values.append(value)
            scheme, _, rest = value.partition(" ")
            if rest.strip() and scheme.isalpha():
                values.append(rest.strip())  # `Bearer KEY`: the key alone too
    values.extend(keys)
    return values


def decodes(encoding: str) -> bool:
    """Whether aiohttp decodes a body in this `Content-Encoding` (it reads one value, any
    letter case; others pass encoded)."""
    return encoding.isascii() and encoding.lower() in _DECODED_ENCODINGS


def transfer_coding_problem(values: list[str]) -> str | None:
    """Why an answer's `Transfer-Encoding` cannot be read (None: none, or only `chunked`,
    which aiohttp undoes). The proxy never asks for another (it sends no `TE`), and aiohttp
    passes any other coding's bytes on still coded, where a held key echoed in them would
    escape redaction, and the client could not read them: such an answer is refused."""
    codings = [part.strip().lower() for value in values for part in value.split(",")]
    if all(coding in ("chunked", "identity", "") for coding in codings):
        return None
    shown = quoted(", ".join(values), 80)
    return (
        f"the upstream answered with Transfer-Encoding {shown}; the proxy reads only chunked "
        "(it did not ask for another)"
    )


def failure_before_answer(exc: BaseException, idle: float) -> tuple[int, str]:
    """The status and reason for an upstream request that got no answer: what happened,
    told apart (cannot connect, no answer in time, closed or broken after connecting, an
    answer in an encoding or a form the proxy cannot read)."""
    detail = describe(exc)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return 504, f"connecting to the upstream timed out ({detail})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return 502, f"connecting to the upstream failed ({detail})"
    if isinstance(exc, aiohttp.SocketTimeoutError | TimeoutError):
        return 504, f"the upstream sent no answer within {idle + READ_MARGIN_SECONDS:g} s"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        return 502, f"the upstream closed the connection before its answer ({detail})"
    if isinstance(exc, aiohttp.ClientResponseError):
        text = str(exc.message)
        if "content-encoding" in text.lower():
            return 502, f"the upstream answered in an encoding the proxy cannot decode ({text})"
        return 502, f"the upstream's answer is not valid HTTP ({quoted(text, 200)})"
    return 502, f"the request to the upstream failed ({detail})"


class UpstreamBody:
    """An upstream response body: its bytes as they arrive (tapped for the recording, then
    redacted of the held key); `aclose` returns the connection to the pool when the body
    was read to its end, else closes it."""

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        exchange: Exchange | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self._response = response
        self._exchange = exchange
        self._redactor = redactor

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks: AsyncIterator[bytes] = self._response.content.iter_any()
        if self._exchange is not None:
            chunks = self._exchange.tap(chunks)
        if self._redactor is None:
            async for chunk in chunks:
                yield chunk
            return
        redacting = self._redactor.bytes_stream()
        async for chunk in chunks:
            released = redacting.feed(chunk)
            if released:
                yield released
        rest = redacting.flush()
        if rest:
            yield rest

    async def aclose(self) -> None:
        finish(self._response)


def finish(response: aiohttp.ClientResponse) -> None:
    """Return the connection to the pool when the body was read to its end, else close it."""
    if response.content.at_eof():
        response.release()
    else:
        response.close()


class ResumableUpstreamBody(UpstreamBody):
    """An upstream body that is not recorded, read by the engine a chunk at a time
    (`engine.ResumableBody`): aiohttp's `readany` loses nothing when its wait is cancelled,
    and a held key is redacted between reads, so a cancelled `read_chunk` leaves nothing
    half done. aiohttp's socket read timer is dropped for it: the engine's one timer per
    stream bounds its silence (the last timer aiohttp armed still runs out, after the
    engine's limit; none is armed after it)."""

    def __init__(self, response: aiohttp.ClientResponse, redactor: Redactor | None = None) -> None:
        super().__init__(response, None, redactor)
        self._redacting = redactor.bytes_stream() if redactor is not None else None
        self._ended = False
        # The next bytes of the body (redacted); b"" once it ended. Nothing to redact:
        # aiohttp's own `readany`, no coroutine of ours around each read.
        self.read_chunk: Callable[[], Awaitable[bytes]] = (
            response.content.readany if redactor is None else self._read_redacted
        )
        connection = response.connection
        protocol = connection.protocol if connection is not None else None
        if protocol is not None:
            protocol.read_timeout = None

    async def _read_redacted(self) -> bytes:
        redacting = self._redacting
        assert redacting is not None
        if self._ended:
            return b""
        content = self._response.content
        while True:
            chunk = await content.readany()
            if not chunk:
                self._ended = True
                return redacting.flush()
            released = redacting.feed(chunk)
            if released:
                return released


@dataclass(frozen=True, slots=True)
class UpstreamRuntime:
    """One upstream of a route as the proxy sends to it: its URL, the key it holds for it
    (read at start; None: the client's credentials pass) and its header (None: the
    protocol's own), the model that replaces the request's (a fall-back), its place in the
    route (0: the route's own upstream), and what of it is redacted from a client's answer."""

    url: str
    key: str | None = field(default=None, repr=False)
    key_header: str | None = None
    model: str | None = None
    index: int = 0
    redactor: Redactor | None = field(default=None, repr=False)
    name: str = ""  # how observers name it: its host (and port, when the URL says one)
    signer: AwsSigner | None = None  # its requests signed with SigV4 (`proxy.sigv4`)

    @property
    def holds_credentials(self) -> bool:
        """Whether the proxy's own credentials go upstream (a key, or a SigV4 signature)."""
        return self.key is not None or self.signer is not None


@dataclass(frozen=True, slots=True)
class RouteRuntime:
    """One route as the proxy serves it: its settings, its upstreams in turn (its own, then
    its fall-backs), the per-request timeout toward them, and what of any of their keys is
    redacted from a client's answer (a pass-through's body may echo any)."""

    settings: RouteSettings
    upstreams: tuple[UpstreamRuntime, ...]
    client_timeout: aiohttp.ClientTimeout
    client_redactor: Redactor | None = field(default=None, repr=False)


def upstream_name(url: str) -> str:
    """An upstream as observers name it: its host, and its port when the URL states one
    (never its path, its query or credentials)."""
    parsed = URL(url)
    host = parsed.raw_host or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parsed.explicit_port}" if parsed.explicit_port is not None else host


def route_runtime(route: RouteSettings, secrets: list[str]) -> RouteRuntime:
    """A route with its keys read (each added to `secrets`)."""
    upstreams: list[UpstreamRuntime] = []
    keys: list[str] = []  # every held secret of the route
    for index, upstream in enumerate(route.upstreams):
        key = upstream.key.read() if upstream.key is not None else None
        if key is not None:
            secrets.append(key)
        header = None if upstream.key_header == "auto" else upstream.key_header
        signer = None
        held = [key] if key is not None else []
        if upstream.aws is not None:
            signer = AwsSigner.from_chain(upstream.aws.region, upstream.aws.profile)
            held = signer.secrets()  # redacted as a key is (those of the start)
            secrets.extend(held)
        keys.extend(held)
        redactor = Redactor(held) if held else None
        upstreams.append(
            UpstreamRuntime(
                upstream.url,
                key,
                header,
                upstream.model,
                index,
                redactor,
                upstream_name(upstream.url),
                signer,
            )
        )
    timeout = upstream_timeout(route.gating.idle_timeout)
    return RouteRuntime(route, tuple(upstreams), timeout, Redactor(keys) if keys else None)
