"""`lockgate proxy`'s flags: each setting of a config file notes that it was given
(`GIVEN_FILE_FLAGS`, refused beside `--config`); the gate's bounds are made from `LIMIT_HELP`."""

from __future__ import annotations

import argparse
from typing import Any

from .. import defaults
from .argtypes import (
    _key_variable,
    _nonempty_path,
    _number,
    _Parser,
    _port,
    _positive_seconds,
    _text,
    add_recording,
    positive_int,
    upstream_url,
)

PROXY_KEEPALIVE_SECONDS = 15.0  # proxy.engine.DEFAULT_KEEPALIVE_SECONDS (kept light here)
PROXY_MAX_STREAMS = 256  # proxy.server.DEFAULT_MAX_STREAMS


_retry_count = _number(int, "a whole number", lambda v: 0 <= v <= 10, "must be between 0 and 10")


# The namespace attribute that lists the option strings given of `lockgate proxy`'s flags
# that are settings of a config file (each a `_Noted` action): refused beside `--config`.
GIVEN_FILE_FLAGS = "given_file_flags"


class _Noted(argparse.Action):
    """Notes the option string it was given as (`GIVEN_FILE_FLAGS`), then acts as the
    action it is mixed into: a flag's default cannot tell whether it was given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        noted: list[str] = list(getattr(namespace, GIVEN_FILE_FLAGS, []))
        if option_string is not None and option_string not in noted:
            noted.append(option_string)
        setattr(namespace, GIVEN_FILE_FLAGS, noted)
        super().__call__(parser, namespace, values, option_string)


class _NotedStore(_Noted, argparse._StoreAction):
    pass


class _NotedStoreTrue(_Noted, argparse._StoreTrueAction):
    pass


class _NotedAppend(_Noted, argparse._AppendAction):
    pass


class _NotedBoolean(_Noted, argparse.BooleanOptionalAction):
    pass


def _add_proxy(commands: argparse._SubParsersAction[_Parser]) -> None:
    proxy = commands.add_parser(
        "proxy", help="gate every provider's responses for any client (an HTTP proxy)"
    )
    source = proxy.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--upstream",
        type=upstream_url,
        metavar="URL",
        help="the provider's origin, e.g. https://api.openai.com (request paths appended): "
        "one route, set by the flags below",
    )
    source.add_argument(
        "--config",
        type=_nonempty_path,
        metavar="FILE",
        help="a YAML file naming the routes, their upstreams, keys, gating and retries",
    )
    proxy.add_argument(
        "--check",
        action="store_true",
        help="print the effective routes and settings (no secret) and exit",
    )
    proxy.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="serve from N processes under gunicorn (needs lockgate[server]); metrics are "
        "summed over them",
    )
    proxy.add_argument(
        "--retries",
        action=_NotedStore,
        type=_retry_count,
        default=0,
        metavar="N",
        help="with --upstream: send a request again, up to N times, when its answer was "
        "refused for a transient reason before any of it reached the client (default 0)",
    )
    proxy.add_argument(
        "--websocket",
        action=_NotedStore,
        choices=("relay", "refuse"),
        default="relay",
        help="with --upstream: what a WebSocket upgrade on a gated path gets: relay (the "
        "proxy gates each response on its own socket upstream; default) or refuse (426, the "
        "client falls back to HTTP)",
    )
    proxy.add_argument(
        "--retry-max-wait",
        action=_NotedStore,
        type=_positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="with --upstream: the longest server-requested wait honoured; longer is "
        "neither waited nor passed on, the client is told not to retry (default 60)",
    )
    proxy.add_argument(
        "--host",
        action=_NotedStore,
        type=_text("--host"),
        default="127.0.0.1",
        help="listen address (default 127.0.0.1; another than loopback needs --allow-remote)",
    )
    proxy.add_argument(
        "--port",
        action=_NotedStore,
        type=_port,
        default=0,
        help="port (default 0: an ephemeral port)",
    )
    proxy.add_argument(
        "--hold",
        action=_NotedStore,
        choices=["tools", "terminal", "all"],
        default="tools",
        help="hold from the first tool call (default), only the finish (calls stream live), "
        "or all of the answer until it is complete and valid (any refusal retried unseen)",
    )
    proxy.add_argument(
        "--first-byte-timeout",
        action=_NotedStore,
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="with --upstream: the longest wait for an answer's head and first content "
        "before it is retried (default: the idle timeout)",
    )
    proxy.add_argument(
        "--idle-timeout",
        action=_NotedStore,
        type=_positive_seconds,
        default=defaults.IDLE_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="refuse a response after this long without a byte "
        f"(default {defaults.IDLE_TIMEOUT_SECONDS:g})",
    )
    proxy.add_argument(
        "--deadline",
        action=_NotedStore,
        type=_positive_seconds,
        default=defaults.DEADLINE_SECONDS,
        metavar="SECONDS",
        help="refuse a response that takes longer than this in total "
        f"(default {defaults.DEADLINE_SECONDS:g})",
    )
    proxy.add_argument(
        "--keepalive",
        action=_NotedStore,
        type=_positive_seconds,
        default=PROXY_KEEPALIVE_SECONDS,
        metavar="SECONDS",
        help="a keep-alive this often while a response is held "
        f"(default {PROXY_KEEPALIVE_SECONDS:g})",
    )
    proxy.add_argument(
        "--validate-schemas",
        action=_NotedBoolean,
        default=True,
        help="check every call's arguments against its tool's schema (the default; "
        "--no-validate-schemas: only that they are a JSON object)",
    )
    proxy.add_argument(
        "--api-key-env",
        action=_NotedStore,
        type=_key_variable,
        metavar="NAME",
        help="hold the key from this variable: it replaces the clients' credentials upstream",
    )
    proxy.add_argument(
        "--client-token-env",
        action=_NotedStore,
        type=_key_variable,
        metavar="NAME",
        help="require the token from this variable on every request",
    )
    proxy.add_argument(
        "--allow-remote",
        action=_NotedStoreTrue,
        help="allow a --host other than loopback (with --api-key-env: --client-token-env too)",
    )
    proxy.add_argument(
        "--max-streams",
        action=_NotedStore,
        type=positive_int,
        default=PROXY_MAX_STREAMS,
        metavar="N",
        help=f"concurrent requests; beyond: 503 (default {PROXY_MAX_STREAMS})",
    )
    proxy.add_argument("--json", action="store_true", help="records as JSON lines on stdout")
    add_recording(proxy)
    _add_proxy_bounds(proxy)


HEAD_TIMEOUT_SECONDS = 30.0  # proxy.server.DEFAULT_HEAD_TIMEOUT (kept light here)
PROXY_MAX_HELD_BYTES = 256 * 1024 * 1024  # proxy.server.DEFAULT_MAX_HELD_BYTES
# The gate's bounds (`gate.GateLimits`): what each flag bounds in one response.
LIMIT_HELP = {
    "max_text_chars": "answer text characters",
    "max_reasoning_chars": "reasoning characters",
    "max_calls": "tool calls",
    "max_argument_chars": "argument characters of one tool call",
    "max_native_items": "provider-side items (executed tools, native output)",
    "max_native_bytes": "bytes of provider-side items",
}

_bound = _number(
    int, "a whole number", lambda v: 1 <= v <= 1_000_000_000, "must be between 1 and 1000000000"
)


def _add_proxy_bounds(proxy: argparse.ArgumentParser) -> None:
    """The flags for where a held key may go, the request head's timeout and the gate's
    bounds."""
    from ..gate import GateLimits

    proxy.add_argument(
        "--allow-host",
        action=_NotedAppend,
        default=[],
        metavar="NAME",
        help="with --api-key-env: a host name clients reach the proxy by, besides IP "
        "literals and localhost (repeatable); any other Host never gets the key",
    )
    proxy.add_argument(
        "--key-on-any-path",
        action=_NotedStoreTrue,
        help="with --api-key-env: send the key with every request, not only model requests, "
        "model listings and token counts",
    )
    proxy.add_argument(
        "--head-timeout",
        action=_NotedStore,
        type=_positive_seconds,
        default=HEAD_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="close a connection whose request head has not arrived this long after it "
        f"opened or after the previous answer (default {HEAD_TIMEOUT_SECONDS:g})",
    )
    proxy.add_argument(
        "--max-held-bytes",
        action=_NotedStore,
        type=_bound,
        default=PROXY_MAX_HELD_BYTES,
        metavar="N",
        help="the bytes all unfinished responses may hold at once; a response that would go "
        f"beyond is refused, the others go on (default {PROXY_MAX_HELD_BYTES})",
    )
    defaults = GateLimits()
    for name, what in LIMIT_HELP.items():
        default = getattr(defaults, name)
        proxy.add_argument(
            "--" + name.replace("_", "-"),
            action=_NotedStore,
            type=_bound,
            default=default,
            metavar="N",
            help=f"refuse a response with more {what} than this (default {default})",
        )
