"""Whole (non-streaming) responses through the engine (`judge_whole`), on every protocol:
judged by the same decoder and gate as a stream, passed unchanged when accepted, a 502 with
the protocol's error body (which the official SDK reads) when refused; and `hold=terminal`,
which streams calls live and holds only the finish."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from lockgate.providers import provider as registry_entry
from lockgate.proxy import Accepted, GatingOptions, Refused, WholeVerdict, judge_whole
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.scenario import EDIT_FIX

from .support import (
    PROTOCOLS,
    ends_with_refusal,
    gate_stream,
    options,
    request_for,
    run,
    tool_events,
    without_keepalives,
)

KEY = "sk-whole-test-key"


def completion(provider: str, reply: Reply) -> bytes:
    body = registry_entry(provider).render().completion(reply)
    return json.dumps(body).encode()


def judged(provider: str, body: bytes, **overrides: Any) -> WholeVerdict:
    entry = registry_entry(provider)
    return judge_whole(entry, request_for(provider), body, GatingOptions(**overrides))


def edit(name: str = "edit", arguments: Any = EDIT_FIX, call_id: str = "call_1") -> Call:
    return Call(call_id, name, arguments, 1)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_an_accepted_whole_response_passes_unchanged(provider: str) -> None:
    body = completion(provider, Reply("resp_whole", (Say("Fixing it."), edit())))
    verdict = judged(provider, body)
    assert isinstance(verdict.outcome, Accepted)
    assert (verdict.status, verdict.body) == (200, body)
    calls = verdict.outcome.decision.message.tool_calls
    assert [(call.name, call.arguments) for call in calls] == [("edit", EDIT_FIX)]
    text = judged(provider, completion(provider, Reply("resp_text", (Say("Done."),))))
    assert isinstance(text.outcome, Accepted)
    assert text.outcome.decision.message.content == "Done."


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_batch_whose_second_call_is_invalid_is_refused_whole(provider: str) -> None:
    parts = (edit(), edit("shell", {"command": "rm -rf ."}, "call_2"))
    verdict = judged(provider, completion(provider, Reply("resp_bad", parts)))
    assert isinstance(verdict.outcome, Refused)
    refusal = verdict.outcome.refusal
    assert (verdict.status, refusal.kind, refusal.withheld) == (502, "invalid_batch", 2)
    assert refusal.message.startswith("lockgate withheld 2 tool calls: invalid_batch: ")
    assert b"edit" not in verdict.body or b"lockgate withheld" in verdict.body
    assert "call_1" not in verdict.body.decode()


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_truncated_whole_response_releases_nothing(provider: str) -> None:
    reply = Reply("resp_cut", (Say("Fixing"), edit()), ending="truncated")
    verdict = judged(provider, completion(provider, reply))
    assert isinstance(verdict.outcome, Refused)
    assert verdict.status == 502
    assert verdict.outcome.refusal.kind in {"response_incomplete", "lifecycle"}


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"not json", "malformed_event"),
        (b"[1, 2]", "malformed_event"),
        (b"{}", None),  # a JSON object that is no response of the protocol
    ],
)
def test_what_is_no_response_is_refused(provider: str, body: bytes, kind: str | None) -> None:
    verdict = judged(provider, body)
    assert isinstance(verdict.outcome, Refused)
    assert verdict.status == 502
    if kind is not None:
        assert verdict.outcome.refusal.kind == kind
    assert json.loads(verdict.body)  # the error body is JSON


def test_a_body_past_the_cap_is_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from lockgate.proxy import whole

    monkeypatch.setattr(whole, "MAX_WHOLE_BYTES", 64)
    body = completion("chat", Reply("resp_big", (Say("x" * 100),)))
    verdict = judged("chat", body)
    assert isinstance(verdict.outcome, Refused)
    assert verdict.outcome.refusal.kind == "bound_exceeded"


def test_a_whole_response_is_checked_against_the_schemas_unless_turned_off() -> None:
    incomplete = {"path": "calculator.py", "old": "a - b"}  # `new` is required
    body = completion("anthropic", Reply("resp_schema", (edit(arguments=incomplete),)))
    assert isinstance(judged("anthropic", body, validate_schemas=False).outcome, Accepted)
    strict = judged("anthropic", body)  # the default
    assert isinstance(strict.outcome, Refused)
    assert strict.outcome.refusal.kind == "invalid_batch"


async def _sdk_error(provider: str, status: int, body: bytes) -> str:
    """The message the official SDK raises with on this non-streaming answer."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, content=body, headers={"content-type": "application/json"})

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    try:
        if provider == "gemini":
            client = genai.Client(
                api_key=KEY,
                http_options=genai_types.HttpOptions(
                    base_url="http://proxy.test", api_version="v1beta", httpx_async_client=http
                ),
            )
            try:
                await client.aio.models.generate_content(model="m", contents="hi")
            except genai_errors.ServerError as exc:  # a 502: google-genai reads its body
                return str(exc.message)
            return ""
        if provider == "anthropic":
            anthropic_client = anthropic.AsyncAnthropic(
                api_key=KEY, base_url="http://proxy.test", http_client=http, max_retries=0
            )
            try:
                await anthropic_client.messages.create(
                    model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
                )
            except anthropic.InternalServerError as exc:
                return exc.message
            return ""
        openai_client = openai.AsyncOpenAI(
            api_key=KEY, base_url="http://proxy.test/v1", http_client=http, max_retries=0
        )
        try:
            if provider == "chat":
                await openai_client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
            else:
                await openai_client.responses.create(model="m", input="hi")
        except openai.InternalServerError as exc:
            return exc.message
        return ""
    finally:
        await http.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_the_sdk_raises_on_the_refused_body_with_its_message(provider: str) -> None:
    parts = (edit(), edit("shell", {"command": "rm -rf ."}, "call_2"))
    verdict = judged(provider, completion(provider, Reply("resp_bad", parts)))
    message = asyncio.run(_sdk_error(provider, verdict.status, verdict.body))
    assert "lockgate withheld 2 tool calls: invalid_batch" in message


# --- hold=terminal ---------------------------------------------------------------------------


def _frames(provider: str, reply: Reply) -> list[bytes]:
    renderer = registry_entry(provider).render()
    return [renderer.frame(event) for event in renderer.events(reply)]


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_hold_terminal_streams_the_calls_and_holds_only_the_finish(provider: str) -> None:
    from .test_engine import Upstream

    frames = _frames(provider, Reply("resp_live", (Say("Fixing."), edit())))
    request = request_for(provider)
    probe = run(gate_stream(provider, request, Upstream([*frames, 30.0]), options(deadline=600.0)))
    live = run(
        gate_stream(
            provider,
            request,
            Upstream([*frames, 30.0]),
            options(deadline=600.0, hold="terminal"),
        )
    )
    # Both refuse (the body never ends: silence); with `tools` no call reached the client,
    # with `terminal` the call's frames did, and the finish did not.
    assert isinstance(probe.outcome, Refused)
    assert isinstance(live.outcome, Refused)
    assert tool_events(probe.output) == []
    assert tool_events(live.output) != []
    assert ends_with_refusal(live.output, provider)
    finishes = [frame for frame in frames if _is_finish(provider, frame)]
    assert finishes
    for frame in finishes:
        assert frame not in live.output
    # Accepted, the output is the input either way.
    done = run(gate_stream(provider, request, Upstream(frames), options(hold="terminal")))
    assert isinstance(done.outcome, Accepted)
    gateway = registry_entry(provider).gateway
    assert gateway is not None
    assert without_keepalives(done.output, gateway()) == without_keepalives(
        b"".join(frames), gateway()
    )


def _is_finish(provider: str, frame: bytes) -> bool:
    if provider == "chat":
        return b'"finish_reason":null' not in frame.replace(b" ", b"") and (
            b"finish_reason" in frame or b"[DONE]" in frame
        )
    if provider == "anthropic":
        return b"message_delta" in frame or b"message_stop" in frame
    if provider == "gemini":
        return b'"finishReason"' in frame
    return b"response.completed" in frame


def test_hold_must_be_a_known_mode() -> None:
    with pytest.raises(ValueError, match="hold must be one of tools, terminal"):
        GatingOptions(hold="everything")  # type: ignore[arg-type]


# --- a whole answer is judged entry by entry, as the client reads it (issue 22, M1) ----------


def _chat_answer(tool_calls: list[dict[str, Any]], **choice: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    first = {"index": 0, "message": message, "finish_reason": "tool_calls", **choice}
    return {
        "id": "chatcmpl-whole",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [first],
    }


def _tool_call(call_id: str, arguments: str, **extra: Any) -> dict[str, Any]:
    function = {"name": "edit", "arguments": arguments}
    return {"id": call_id, "type": "function", "function": function, **extra}


def test_chat_entries_that_name_one_index_are_not_merged() -> None:
    # The client (`message.tool_calls`, a list) reads two entries: the judged edit, and one
    # with the same id and empty arguments. Merged by their `index`, the gate saw one call.
    answer = _chat_answer(
        [
            _tool_call("call_1", json.dumps(EDIT_FIX), index=0),
            _tool_call("call_1", "", index=0),
        ]
    )
    verdict = judged("chat", json.dumps(answer).encode())
    assert isinstance(verdict.outcome, Refused)
    assert verdict.outcome.refusal.kind == "invalid_batch"
    assert verdict.outcome.refusal.withheld == 2


def test_chat_entries_are_judged_in_the_order_the_client_reads_them() -> None:
    # Their own `index`es say the opposite order; the client runs them in list order.
    first = _tool_call("call_1", json.dumps({"path": "README.md"}), index=1)
    first["function"]["name"] = "read"
    answer = _chat_answer([first, _tool_call("call_2", json.dumps(EDIT_FIX), index=0)])
    verdict = judged("chat", json.dumps(answer).encode())
    assert isinstance(verdict.outcome, Accepted)
    calls = verdict.outcome.decision.message.tool_calls
    assert [call.id for call in calls] == ["call_1", "call_2"]


def test_chat_choices_that_name_one_index_are_two_choices() -> None:
    # `choices[0]` is what a client reads; a second choice that says `index: 0` too would
    # be merged into it by the stream's rules.
    answer = _chat_answer([_tool_call("call_1", '{"path": "calculator.py", ')])
    answer["choices"][0]["finish_reason"] = None
    second = {
        "index": 0,
        "message": {
            "role": "assistant",
            "tool_calls": [_tool_call("call_1", '"old": "return a - b", "new": "return a + b"}')],
        },
        "finish_reason": "tool_calls",
    }
    answer["choices"].append(second)
    verdict = judged("chat", json.dumps(answer).encode())
    assert isinstance(verdict.outcome, Refused)
    assert verdict.outcome.refusal.kind == "lifecycle"


def test_anthropic_content_that_is_not_a_list_is_refused() -> None:
    # Read as no blocks, the gate would accept a body whose one block it never judged.
    body = json.loads(completion("anthropic", Reply("resp_dict", (edit("shell", {"c": 1}),))))
    [block] = body["content"]
    body["content"] = block
    verdict = judged("anthropic", json.dumps(body).encode())
    assert isinstance(verdict.outcome, Refused)
    assert verdict.outcome.refusal.kind == "malformed_event"


def test_every_responses_output_item_is_judged_in_its_place() -> None:
    # Each item the client reads in `output`: a call after text, an action item lockgate
    # has no executor for (refused), two calls that share an item id (refused).
    body = json.loads(completion("responses", Reply("resp_items", (Say("Fixing."), edit()))))
    accepted = judged("responses", json.dumps(body).encode())
    assert isinstance(accepted.outcome, Accepted)
    shell = {
        "type": "local_shell_call",
        "id": "lsh_1",
        "call_id": "call_shell",
        "action": {"type": "exec", "command": ["cat", "/etc/passwd"], "env": {}},
        "status": "completed",
    }
    with_shell = {**body, "output": [*body["output"], shell]}
    refused = judged("responses", json.dumps(with_shell).encode())
    assert isinstance(refused.outcome, Refused)
    assert refused.outcome.refusal.kind == "invalid_batch"  # the request declares no shell
    assert "a local_shell_call item, but the request declares no such built-in tool" in (
        refused.outcome.refusal.message
    )
    request = request_for("responses")
    declared = {**request, "tools": [*request["tools"], {"type": "local_shell"}]}
    runs = judge_whole(registry_entry("responses"), declared, json.dumps(with_shell).encode())
    assert isinstance(runs.outcome, Accepted)  # a client that declared the shell may run it
    assert [call.name for call in runs.outcome.decision.message.tool_calls] == [
        "edit",
        "local_shell_call",
    ]
    call = body["output"][-1]
    twice = {**body, "output": [*body["output"], {**call, "call_id": "call_2"}]}
    duplicated = judged("responses", json.dumps(twice).encode())
    assert isinstance(duplicated.outcome, Refused)
    assert duplicated.outcome.refusal.kind == "lifecycle"
