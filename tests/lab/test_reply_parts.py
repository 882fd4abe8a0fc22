"""The reply parts only the Responses protocol has (a call in a tool namespace, a custom tool
call, a client-executed shell_call, a compaction item): Responses renders them; every other
protocol refuses them, stream and whole answer alike, rather than render something else (a
namespaced call as a plain one, a custom call as nothing)."""

from __future__ import annotations

import pytest

from lockgate.providers import NAMES
from lockgate.providers import provider as registry_entry
from lockgate.scripted.reply import (
    Call,
    Compaction,
    CustomCall,
    Part,
    Reply,
    Say,
    ShellCall,
    responses_only,
)
from lockgate.scripted.scenario import EDIT_FIX

RESPONSES_ONLY: dict[str, Part] = {
    "a call in a tool namespace": Call("call_1", "edit", EDIT_FIX, namespace="files"),
    "a custom (free-form) tool call": CustomCall("call_1", "exec", "ls"),
    "a client-executed shell_call": ShellCall("call_1", ("ls",)),
    "a compaction item": Compaction(),
}
OTHERS = [name for name in NAMES if name != "responses"]


@pytest.mark.parametrize("provider", OTHERS)
@pytest.mark.parametrize("what", list(RESPONSES_ONLY))
def test_every_other_protocol_refuses_a_responses_only_part(provider: str, what: str) -> None:
    renderer = registry_entry(provider).render()
    reply = Reply("resp_only", (Say("Fixing."), RESPONSES_ONLY[what]))
    for render in (renderer.events, renderer.completion):
        with pytest.raises(ValueError, match="cannot express") as raised:
            render(reply)
        assert what in str(raised.value)


@pytest.mark.parametrize("what", list(RESPONSES_ONLY))
def test_responses_renders_each_of_them(what: str) -> None:
    assert responses_only(RESPONSES_ONLY[what]) == what
    renderer = registry_entry("responses").render()
    reply = Reply("resp_only", (Say("Fixing."), RESPONSES_ONLY[what]))
    assert renderer.events(reply)[-1]["type"] == "response.completed"
    assert len(renderer.completion(reply)["output"]) == 2


def test_every_protocol_renders_a_plain_call() -> None:
    assert responses_only(Call("call_1", "edit", EDIT_FIX)) is None
    for provider in NAMES:
        reply = Reply("resp_plain", (Call("call_1", "edit", EDIT_FIX),))
        assert registry_entry(provider).render().events(reply)


def test_nothing_after_a_cut_custom_call_is_sent() -> None:
    cut = CustomCall("call_1", "exec", "a long command line", cut=True)
    reply = Reply("resp_cut", (Say("before"), cut, Say("after"), Compaction()), "open")
    assert reply.sent_parts == (Say("before"), cut)
    assert reply.calls == ()  # the function calls only
    whole = CustomCall("call_1", "exec", "a long command line")
    assert whole.sent_input == whole.input
    assert cut.sent_input
    assert whole.input.startswith(cut.sent_input)
    assert cut.sent_input != whole.input
