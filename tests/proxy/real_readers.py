"""The real Python readers of the gate's output: the installed libraries themselves, each as
a client uses it, reading over HTTP (no port of their rules, unlike `readers.py`).

- `openai-chat`: openai-python, `client.chat.completions.create(stream=True)`, every chunk
  accumulated by the SDK's own `ChatCompletionStreamState` (what `chat.completions.stream`
  does), its final completion (or, where the stream raised, its snapshot then).
- `openai-responses`: `client.responses.stream(...)`, its final response (or its snapshot).
- `anthropic`: `client.messages.stream(...)`, `get_final_message()` (or its snapshot).
- `genai-aiohttp` and `genai-httpx2`: google-genai's `generate_content_stream`, the function
  calls a client collects from the chunks (`chunk.function_calls`), over aiohttp (its
  default) and over an `httpx2` client (the one `gated_client()` gives it).
- `litellm-openai` and `litellm-anthropic`: `litellm.acompletion(..., stream=True)` with
  `api_base` at the server, the chunks accumulated by `litellm.stream_chunk_builder`
  (through the transport, the openai route is given an `AsyncOpenAI` over `gated_client()`;
  litellm's own HTTP clients are `httpx`, not `httpx2`, so its anthropic route has none).

Every client runs with `max_retries=0` and a placeholder key, against loopback only.
litellm reads its cost map from the package (`LITELLM_LOCAL_MODEL_COST_MAP`, set before
it is imported), runs without callbacks or telemetry, and is told a neutral model name (a
llama one makes it fetch a tokenizer from the Hugging Face hub; `HF_HUB_OFFLINE` is set
too). `loopback_only` refuses, and counts, any connection beyond loopback.

`Upstream` serves given bytes to any request (and keeps the requests); `ROUTES` are the
three ways a reader gets them: `direct` (from the upstream), `proxy` (through `lockgate
proxy`, in process, in front of the upstream) and `transport` (`gated_client()` in the
reader's process). `read` returns what the reader ended with (`Read`: the calls it holds,
with their argument text where it keeps one, its text, what it raised); `findings`
compares that with what the gate released.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")
os.environ.setdefault("LITELLM_LOG", "CRITICAL")
# litellm counts tokens where a stream reports none, with a tokenizer it would fetch from the
# Hugging Face hub for some model names (llama, command-r): never (and the model names it is
# given are neutral ones).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import contextlib
import json
import math
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
import openai
from aiohttp import web
from google import genai
from google.genai import types as genai_types
from openai.lib.streaming.chat import ChatCompletionStreamState

from lockgate.conversation import ToolCall
from lockgate.proxy import Accepted, GatingOptions, gated_client
from lockgate.proxy.server import ProxyConfig, ProxyRecord, RunningProxy, serving

from .support import Chunks, aiohttp_loopback, gate_stream

__all__ = [
    "KEY",
    "LITELLM_WARNING",
    "READERS",
    "REFUSED",
    "ROUTES",
    "UNPARSED",
    "HeldCall",
    "Read",
    "Reader",
    "Upstream",
    "findings",
    "litellm_available",
    "loopback_only",
    "read",
    "released_calls",
    "strict_problem",
]

KEY = "sk-placeholder-not-a-key"
# What litellm's logging warns after a stream with thinking blocks (its own model's type).
LITELLM_WARNING = "Pydantic serializer warnings"
MODEL = "lab-model"
# The model litellm is told (whatever the recording's): a name that selects no tokenizer of
# the Hugging Face hub (litellm fetches one for llama and command-r names).
LITELLM_MODEL = "lockgate-model"
ROUTES = ("direct", "proxy", "transport")


# --- what a reader ended with -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeldCall:
    """A call a reader holds: its id and name (None: it has none), its argument text where
    it keeps one (Chat, Responses, litellm), and the arguments as it parsed them (else the
    text parsed as JSON; `UNPARSED` where it is no JSON)."""

    id: str | None
    name: str | None
    arguments: str | None
    value: object
    form: str = "function"  # or "custom" (free text), or a built-in tool's item type


@dataclass(frozen=True, slots=True)
class Read:
    reader: str
    route: str
    calls: tuple[HeldCall, ...]
    text: str
    raised: str | None  # the exception's type and message; None: it read to the end


class _Unparsed:
    def __repr__(self) -> str:
        return "<not JSON>"


UNPARSED = _Unparsed()


def _parsed(text: str | None) -> object:
    if text is None:
        return None
    if text == "":
        return {}
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return UNPARSED


# --- the upstream and the routes ------------------------------------------------------------


@dataclass(slots=True)
class Upstream:
    """A loopback server answering every request with `body` (200, `text/event-stream`),
    keeping each request's path and JSON body."""

    body: bytes = b""
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    url: str = ""

    async def answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        self.requests.append((request.path, value if isinstance(value, dict) else {}))
        return web.Response(
            status=200, body=self.body, headers={"content-type": "text/event-stream"}
        )


@contextlib.asynccontextmanager
async def upstream_and_proxy(
    gating: GatingOptions, log: Callable[[ProxyRecord], None]
) -> AsyncIterator[tuple[Upstream, RunningProxy]]:
    upstream = Upstream()
    async with (
        aiohttp_loopback(upstream.answer) as upstream.url,
        serving(ProxyConfig(upstream.url, gating=gating), log) as proxy,
    ):
        yield upstream, proxy


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a reader sends its request: the host root, and the `httpx2` client it is given
    (None: the library's own)."""

    route: str
    base: str
    http: Callable[[], httpx2.AsyncClient] | None


# --- the readers ------------------------------------------------------------------------------


def _rest(request: Mapping[str, Any], *drop: str) -> dict[str, Any]:
    return {key: value for key, value in request.items() if key not in {"stream", *drop}}


def _openai_client(at: Endpoint) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=KEY,
        base_url=at.base + "/v1",
        max_retries=0,
        http_client=at.http() if at.http else None,
    )


async def _to_the_end(
    open_stream: Callable[[], Any], final: str, snapshot: str
) -> tuple[Any, str | None]:
    """An SDK stream helper (`open_stream()`, an async context manager) read to its end:
    (what `final()` gives, None); or, when it raised, (its `snapshot` then, where it has one,
    the error)."""
    got: Any = None
    stream: Any = None
    try:
        async with open_stream() as stream:
            async for _ in stream:
                pass
            got = await getattr(stream, final)()
    except Exception as exc:
        if stream is not None:
            with contextlib.suppress(Exception):
                got = getattr(stream, snapshot)
        return got, _describe(exc)
    return got, None


async def _openai_chat(request: Mapping[str, Any], at: Endpoint) -> Read:
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    raised = None
    client = _openai_client(at)
    async with client:
        try:
            stream = await client.chat.completions.create(
                model=str(request.get("model") or MODEL),
                messages=[{"role": "user", "content": "x"}],
                stream=True,
                extra_body=_rest(request, "model"),
            )
            async for chunk in stream:
                state.handle_chunk(chunk)
        except Exception as exc:
            raised = _describe(exc)
    completion: Any = None
    if raised is None:
        try:
            completion = state.get_final_completion()
        except Exception as exc:
            raised = _describe(exc)
    if completion is None:
        try:
            completion = state.current_completion_snapshot
        except Exception:
            completion = None
    calls: list[HeldCall] = []
    text = ""
    if completion is not None and completion.choices:
        message = completion.choices[0].message
        text = message.content or ""
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)
            arguments = getattr(function, "arguments", None)
            calls.append(
                HeldCall(call.id, getattr(function, "name", None), arguments, _parsed(arguments))
            )
    return Read("openai-chat", at.route, tuple(calls), text, raised)


# The Responses items a client executes itself (the gate releases them as calls).
_CLIENT_ITEMS = frozenset(
    {"shell_call", "local_shell_call", "apply_patch_call", "computer_call", "tool_search_call"}
)


async def _openai_responses(request: Mapping[str, Any], at: Endpoint) -> Read:
    client = _openai_client(at)
    async with client:
        response, raised = await _to_the_end(
            lambda: client.responses.stream(
                model=str(request.get("model") or MODEL),
                input="x",
                extra_body=_rest(request, "model", "input"),
            ),
            "get_final_response",
            "current_snapshot",
        )
    calls: list[HeldCall] = []
    text = ""
    for item in getattr(response, "output", None) or []:
        kind = getattr(item, "type", None)
        if kind == "function_call":
            arguments = getattr(item, "arguments", None)
            calls.append(
                HeldCall(
                    getattr(item, "call_id", None),
                    getattr(item, "name", None),
                    arguments,
                    _parsed(arguments),
                )
            )
        elif kind == "custom_tool_call":
            text_input = getattr(item, "input", None)
            calls.append(
                HeldCall(
                    getattr(item, "call_id", None),
                    getattr(item, "name", None),
                    text_input,
                    None,
                    "custom",
                )
            )
        elif (
            isinstance(kind, str)
            and kind in _CLIENT_ITEMS
            and (kind != "tool_search_call" or getattr(item, "execution", None) == "client")
        ):
            action = {
                key: value
                for key, value in item.model_dump(mode="json", exclude_unset=True).items()
                if key not in ("id", "call_id", "type", "status")
            }
            calls.append(HeldCall(getattr(item, "call_id", None), kind, None, action, kind))
        elif kind == "message":
            for part in getattr(item, "content", None) or []:
                if getattr(part, "type", None) == "output_text":
                    text += getattr(part, "text", "") or ""
    return Read("openai-responses", at.route, tuple(calls), text, raised)


async def _anthropic(request: Mapping[str, Any], at: Endpoint) -> Read:
    client = anthropic.AsyncAnthropic(
        api_key=KEY,
        base_url=at.base,
        max_retries=0,
        http_client=at.http() if at.http else None,
    )
    async with client:
        message, raised = await _to_the_end(
            lambda: client.messages.stream(
                model=str(request.get("model") or MODEL),
                max_tokens=int(request.get("max_tokens") or 1024),
                messages=[{"role": "user", "content": "x"}],
                extra_body=_rest(request, "model", "max_tokens", "messages"),
            ),
            "get_final_message",
            "current_message_snapshot",
        )
    calls: list[HeldCall] = []
    text = ""
    for block in getattr(message, "content", None) or []:
        kind = getattr(block, "type", None)
        if kind == "tool_use":
            calls.append(HeldCall(block.id, block.name, None, block.input))
        elif kind == "text":
            text += block.text or ""
    return Read("anthropic", at.route, tuple(calls), text, raised)


def _genai_calls(chunks: Sequence[genai_types.GenerateContentResponse]) -> list[HeldCall]:
    calls = []
    for chunk in chunks:
        try:
            found = chunk.function_calls or []
        except Exception:
            continue
        for call in found:
            calls.append(HeldCall(call.id, call.name, None, call.args if call.args else {}))
    return calls


def _genai_text(chunks: Sequence[genai_types.GenerateContentResponse]) -> str:
    text = ""
    for chunk in chunks:
        for candidate in (chunk.candidates or [])[:1]:
            content = candidate.content
            for part in (content.parts if content is not None else None) or []:
                if part.text and not part.thought:
                    text += part.text
    return text


async def _genai(name: str, request: Mapping[str, Any], at: Endpoint) -> Read:
    raised = None
    chunks: list[genai_types.GenerateContentResponse] = []
    extra = _rest(request, "contents")
    options = genai_types.HttpOptions(base_url=at.base, api_version="v1beta")
    sync_http = None
    async_http = None
    if name == "genai-httpx2":
        sync_http = httpx2.Client(transport=httpx2.MockTransport(_never))
        async_http = at.http() if at.http else httpx2.AsyncClient()
        options = genai_types.HttpOptions(
            base_url=at.base,
            api_version="v1beta",
            httpx_async_client=async_http,
            httpx_client=sync_http,
        )
    client = genai.Client(api_key=KEY, http_options=options)
    try:
        stream = await client.aio.models.generate_content_stream(
            model=MODEL,
            contents="x",
            config=genai_types.GenerateContentConfig(
                http_options=genai_types.HttpOptions(extra_body=extra) if extra else None
            ),
        )
        async for chunk in stream:
            chunks.append(chunk)
    except Exception as exc:
        raised = _describe(exc)
    finally:
        await client.aio.aclose()
        if async_http is not None:
            await async_http.aclose()
        if sync_http is not None:
            sync_http.close()
    return Read(name, at.route, tuple(_genai_calls(chunks)), _genai_text(chunks), raised)


def _never(request: httpx2.Request) -> httpx2.Response:
    raise AssertionError("google-genai used its sync client")


# litellm, imported once (and only where it is installed), quiet and offline.
_LITELLM: list[Any] = []


def litellm_available() -> bool:
    try:
        _litellm()
    except ImportError:
        return False
    return True


def _litellm() -> Any:
    if not _LITELLM:
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.drop_params = True
        litellm.callbacks = []
        litellm.success_callback = []
        litellm.failure_callback = []
        litellm._async_success_callback = []
        litellm._async_failure_callback = []
        litellm.input_callback = []
        litellm.service_callback = []
        _LITELLM.append(litellm)
    return _LITELLM[0]


def _openai_tools(protocol: str, request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's function tools in the OpenAI Chat form litellm takes."""
    tools = request.get("tools")
    found: list[dict[str, Any]] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if protocol == "chat" and tool.get("type") == "function":
            found.append(tool)
        elif protocol == "anthropic" and isinstance(tool.get("input_schema"), dict):
            if tool.get("type") not in (None, "custom"):
                continue
            function = {"name": tool.get("name"), "parameters": tool["input_schema"]}
            if isinstance(tool.get("description"), str):
                function["description"] = tool["description"]
            found.append({"type": "function", "function": function})
    return found


async def _litellm_read(name: str, request: Mapping[str, Any], at: Endpoint) -> Read:
    litellm = _litellm()
    protocol = "chat" if name == "litellm-openai" else "anthropic"
    messages = [{"role": "user", "content": "x"}]
    arguments: dict[str, Any] = {
        "messages": messages,
        "api_key": KEY,
        "stream": True,
        "max_retries": 0,
        "num_retries": 0,
    }
    tools = _openai_tools(protocol, request)
    if tools:
        arguments["tools"] = tools
    client = None
    if protocol == "chat":
        arguments["model"] = "openai/" + LITELLM_MODEL
        arguments["api_base"] = at.base + "/v1"
        if at.http is not None:
            client = _openai_client(at)
            arguments["client"] = client
    else:
        arguments["model"] = "anthropic/" + LITELLM_MODEL
        arguments["api_base"] = at.base
        arguments["max_tokens"] = int(request.get("max_tokens") or 1024)
    chunks: list[Any] = []
    raised = None
    try:
        stream = await litellm.acompletion(**arguments)
        async for chunk in stream:
            chunks.append(chunk)
    except Exception as exc:
        raised = _describe(exc)
    finally:
        if client is not None:
            await client.close()
    calls: list[HeldCall] = []
    text = ""
    if chunks:
        try:
            built = litellm.stream_chunk_builder(chunks, messages=messages)
        except Exception as exc:
            raised = raised or _describe(exc)
            built = None
        if built is not None and built.choices:
            message = built.choices[0].message
            text = message.content or ""
            for call in message.tool_calls or []:
                text_arguments = call.function.arguments
                calls.append(
                    HeldCall(call.id, call.function.name, text_arguments, _parsed(text_arguments))
                )
    return Read(name, at.route, tuple(calls), text, raised)


Reading = Callable[[Mapping[str, Any], Endpoint], Awaitable[Read]]


@dataclass(frozen=True, slots=True)
class Reader:
    name: str
    protocol: str
    read: Reading
    routes: tuple[str, ...] = ROUTES


def _named(
    name: str, reading: Callable[[str, Mapping[str, Any], Endpoint], Awaitable[Read]]
) -> Reading:
    async def read(request: Mapping[str, Any], at: Endpoint) -> Read:
        return await reading(name, request, at)

    return read


READERS: tuple[Reader, ...] = (
    Reader("openai-chat", "chat", _openai_chat),
    Reader("litellm-openai", "chat", _named("litellm-openai", _litellm_read)),
    Reader("openai-responses", "responses", _openai_responses),
    Reader("anthropic", "anthropic", _anthropic),
    Reader(
        "litellm-anthropic",
        "anthropic",
        _named("litellm-anthropic", _litellm_read),
        ("direct", "proxy"),
    ),
    Reader("genai-aiohttp", "gemini", _named("genai-aiohttp", _genai), ("direct", "proxy")),
    Reader("genai-httpx2", "gemini", _named("genai-httpx2", _genai)),
)


def _describe(exc: BaseException) -> str:
    text = str(exc).replace("\n", " ")
    return f"{type(exc).__name__}: {text[:200]}"


async def read(
    reader: Reader,
    request: Mapping[str, Any],
    route: str,
    upstream: Upstream,
    proxy: RunningProxy,
    gating: GatingOptions,
) -> Read:
    """What `reader` ends with, reading `upstream`'s body by `route`."""
    if route == "proxy":
        at = Endpoint(route, proxy.url, None)
    elif route == "transport":
        at = Endpoint(route, upstream.url, lambda: gated_client(gating))
    else:
        at = Endpoint(route, upstream.url, None)
    return await reader.read(request, at)


# --- what the gate released, and the findings ---------------------------------------------


async def released_calls(
    protocol: str, request: Mapping[str, Any], body: bytes, gating: GatingOptions
) -> tuple[ToolCall, ...] | None:
    """The calls the gate releases of `body` for `request` (None: it refuses it)."""
    gated = await gate_stream(protocol, request, Chunks([body]), gating)
    if isinstance(gated.outcome, Accepted):
        return tuple(gated.outcome.decision.message.tool_calls)
    return None


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _Duplicate("a duplicate key")
    return dict(pairs)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _lone_surrogate(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any(0xD800 <= ord(char) <= 0xDFFF for char in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def strict_problem(text: str) -> str | None:
    """Why `text` is not strict JSON as the gate's rules have it (RFC 8259 §4, §8.2, §6: a
    duplicate key, a lone surrogate, NaN or Infinity); None: it is. An integer beyond ±2⁵³
    is JSON, and every Python reader keeps it exactly as the gate validated it."""
    if text == "":
        return None
    try:
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
        )
    except _Duplicate:
        return "a duplicate key"
    except (ValueError, RecursionError) as exc:
        return f"not JSON ({exc})"
    if _lone_surrogate(value):
        return "a lone surrogate"
    return None


def _value_problem(value: object) -> str | None:
    """What is not strict JSON in a value a reader parsed (NaN, Infinity, lone surrogates)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{item!r} (not JSON)"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    if _lone_surrogate(value):
        return "a lone surrogate"
    return None


def _same(a: object, b: object) -> bool:
    """Equal as JSON values, types kept (1 is not 1.0 nor true) and NaN equal to NaN."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _matches(held: HeldCall, call: ToolCall) -> bool:
    # A call without an id (none, or ""; Gemini's, some Chat servers') is given one by the
    # gate: it is the same call when its name and arguments are.
    if held.id and held.id != call.id:
        return False
    if held.name != call.name:
        return False
    if held.arguments is not None:
        return held.arguments == call.arguments_json or (
            call.arguments_json == "" and held.arguments in ("", "{}") and call.arguments == {}
        )
    return _same(held.value, call.arguments)


def _grammar(request: Mapping[str, Any], name: str | None) -> str | None:
    """The regex a custom tool of the request declares its input must match (None: none
    declared, or a grammar of another syntax)."""
    tools = request.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        members = tool.get("tools") if tool.get("type") == "namespace" else [tool]
        for member in members if isinstance(members, list) else []:
            if not isinstance(member, dict) or member.get("type") != "custom":
                continue
            shape = member.get("format")
            if (
                member.get("name") == name
                and isinstance(shape, dict)
                and shape.get("type") == "grammar"
                and shape.get("syntax") == "regex"
            ):
                definition = shape.get("definition")
                return definition if isinstance(definition, str) else None
    return None


def findings(
    read_: Read, released: Sequence[ToolCall] | None, request: Mapping[str, Any]
) -> list[str]:
    """What `read_` ended with that the gate did not release: every call of a refused
    stream; on an accepted one, a call whose id, name or arguments differ from every call
    released (argument text byte for byte where the reader keeps it, else the parsed value,
    types kept; a reader that raised may hold a call whose text is not yet JSON: its client
    has nothing it could act on), a call whose arguments are not strict JSON, and a custom
    tool call whose input does not match its declared regex (the gate's rules release
    neither)."""
    found = []
    if released is None:
        for call in read_.calls:
            found.append(f"holds {_show(call)} of a refused stream")
        return found
    free = list(released)
    for call in read_.calls:
        match = next((kept for kept in free if _matches(call, kept)), None)
        if match is None and read_.raised is not None and call.value is UNPARSED:
            continue  # a call the reader was reading when it raised: nothing to act on
        if match is None:
            found.append(f"holds {_show(call)}, which the gate did not release")
            continue
        free.remove(match)
        if call.form == "custom":
            pattern = _grammar(request, call.name)
            if pattern is not None and re.fullmatch(pattern, call.arguments or "") is None:
                found.append(f"holds {_show(call)}: its input does not match {pattern!r}")
            continue
        if call.form != "function":
            continue
        problem = (
            strict_problem(call.arguments)
            if call.arguments is not None
            else _value_problem(call.value)
        )
        if problem is None and match.arguments_json:
            problem = strict_problem(match.arguments_json)
        if problem is not None:
            found.append(f"holds {_show(call)}: released arguments with {problem}")
    return found


def _show(call: HeldCall) -> str:
    shown = call.arguments if call.arguments is not None else repr(call.value)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    shown = shown.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate
    return f"{call.name!r} ({call.id!r}) {shown}"


# --- loopback only --------------------------------------------------------------------------


_LOOPBACK = ("127.0.0.1", "::1", "localhost")
# Every connection or lookup `loopback_only` refused (none is expected: a library that tries
# one is reported by the differential).
REFUSED: list[str] = []


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """Within the block, a connection anywhere but loopback raises (a guard: nothing here
    may reach the network, litellm included)."""
    original = socket.socket.connect
    original_ex = socket.socket.connect_ex
    original_getaddrinfo = socket.getaddrinfo

    def check(address: object) -> None:
        if isinstance(address, tuple) and address and address[0] not in _LOOPBACK:
            REFUSED.append(f"a connection to {address[0]!r}")
            raise OSError(f"loopback only: a connection to {address[0]!r} refused")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        original(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return original_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode()
        if host is not None and host not in _LOOPBACK:
            REFUSED.append(f"a lookup of {host!r}")
            raise OSError(f"loopback only: no lookup of {host!r}")
        return original_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        socket.socket.connect = original  # type: ignore[method-assign]
        socket.socket.connect_ex = original_ex  # type: ignore[method-assign]
        socket.getaddrinfo = original_getaddrinfo
