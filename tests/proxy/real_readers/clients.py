"""The real readers: openai-python, anthropic, google-genai and litellm, each run as a client
uses it against an endpoint, and `read`, which runs one by name."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import openai
from google import genai
from google.genai import types as genai_types
from openai.lib.streaming.chat import ChatCompletionStreamState

from lockgate.proxy import GatingOptions, gated_client
from lockgate.proxy.server import RunningProxy

from .base import KEY, LITELLM_MODEL, MODEL, ROUTES, HeldCall, Read, _parsed
from .routes import Endpoint, Upstream

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
