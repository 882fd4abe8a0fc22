"""Custom tools' grammars (issue 27, finding 5): a custom tool's input is checked against its
declared Lark or regex grammar with llguidance, the engine the provider constrains it with,
so a batch holding an input the grammar refuses (Codex's `exec` with nothing in it) is
invalid and nothing of it runs. A grammar the checker cannot use is an unusable schema:
named, and that tool's input is then any text."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lockgate import grammar as grammar_module
from lockgate.errors import FailureKind
from lockgate.events import (
    CALL_CUSTOM,
    FINISH_WITH_CALLS,
    OutputCall,
    ResponseCompleted,
    ResponseStarted,
    ToolArgumentsDelta,
    ToolCallStarted,
)
from lockgate.gate import InvalidBatch, ResponseGate
from lockgate.gateway import DeclaredTool, declared_tool
from lockgate.grammar import InputFormat, grammar_check, input_format

from ..codex_grammars import APPLY_PATCH_GRAMMAR, EXEC_GRAMMAR

PATCH = (
    "*** Begin Patch\n*** Update File: calculator.py\n@@ def add(a, b):\n"
    "-    return a - b\n+    return a + b\n*** End Patch\n"
)


def problem(syntax: str, definition: str, text: str) -> str | None:
    checker = grammar_check(InputFormat(syntax, definition))
    assert not isinstance(checker, str), checker
    return checker.problem(text)


# --- the checker on Codex's real grammars ----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "await tools.exec_command({cmd: 'ls -la'})",
        "// @exec: {\"yield_time_ms\": 1000}\nawait tools.exec_command({cmd: 'make'})",
        "x",
        "\n",
        "const s = 'héllo ✓';\n",
    ],
)
def test_codexs_exec_grammar_accepts_any_nonempty_source(text: str) -> None:
    assert problem("lark", EXEC_GRAMMAR, text) is None


def test_codexs_exec_grammar_refuses_an_empty_input() -> None:
    assert problem("lark", EXEC_GRAMMAR, "") == (
        "does not match its lark grammar (the input is incomplete)"
    )


@pytest.mark.parametrize(
    "text",
    [
        PATCH,
        PATCH.removesuffix("\n"),  # the last line end is optional
        "*** Begin Patch\n*** Add File: notes.txt\n+first\n+second\n*** End Patch\n",
        "*** Begin Patch\n*** Delete File: old.py\n*** End Patch\n",
        "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n@@\n-x\n+y\n*** End Patch",
    ],
)
def test_codexs_apply_patch_grammar_accepts_a_patch(text: str) -> None:
    assert problem("lark", APPLY_PATCH_GRAMMAR, text) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not a patch at all",
        "*** Begin Patch\n*** End Patch\n",  # no hunk
        "*** Begin Patch\n*** Add File: notes.txt\nfirst\n*** End Patch\n",  # no '+'
        PATCH.replace("*** End Patch\n", ""),  # cut before its end
        '{"patch": "*** Begin Patch"}',  # wrapped in JSON
    ],
)
def test_codexs_apply_patch_grammar_refuses_what_is_no_patch(text: str) -> None:
    found = problem("lark", APPLY_PATCH_GRAMMAR, text)
    assert found is not None
    assert found.startswith("does not match its lark grammar")


def test_a_grammar_may_hold_what_looks_like_a_token_in_its_text() -> None:
    assert problem("lark", 'start: "<|" /[a-z]+/ "|>"', "<|end|>") is None
    assert problem("regex", "<|>", ">") is None


def test_a_regex_format_must_match_the_whole_input() -> None:
    digits = r"[0-9]{1,4}(\.[0-9]+)?"
    assert problem("regex", digits, "2026") is None
    assert problem("regex", digits, "3.25") is None
    for text in ("", "12345", "12a", " 12", "1.", "x2026"):
        assert problem("regex", digits, text) is not None, text


def test_text_and_no_format_accept_anything() -> None:
    assert input_format({"type": "text"}) == (None, None)
    assert input_format(None) == (None, None)
    for declared in ({"type": "text"}, None):
        tool = declared_tool(
            "exec",
            "",
            None,
            validate_schemas=True,
            form=CALL_CUSTOM,
            input_format_declared=declared,
        )
        assert isinstance(tool, DeclaredTool)
        assert (tool.grammar, tool.schema_problem) == (None, None)
        assert judge([tool], [("call_1", "exec", ""), ("call_2", "exec", "\x00 anything")])


@pytest.mark.parametrize(
    ("declared", "why"),
    [
        ({"type": "grammar", "syntax": "lark", "definition": "start: missing_rule"}, "llguidance"),
        ({"type": "grammar", "syntax": "regex", "definition": "[0-9"}, "llguidance"),
        ({"type": "grammar", "syntax": "ebnf", "definition": "x"}, "not lark or regex"),
        ({"type": "grammar", "syntax": "lark"}, "no definition"),
        ({"type": "json_schema"}, "not one the gate knows"),
        ("lark", "not a JSON object"),
        (
            {"type": "grammar", "syntax": "lark", "definition": "start: " + "'a' " * 40_000},
            "larger than",
        ),
        (
            {"type": "grammar", "syntax": "lark", "definition": "start[max_tokens=3]: /.+/"},
            "tokens",
        ),
        ({"type": "grammar", "syntax": "lark", "definition": "start: /.+/ <|end|>"}, "token"),
        ({"type": "grammar", "syntax": "lark", "definition": 'start: "a" <[42]>'}, "tokens"),
    ],
)
def test_a_grammar_the_checker_cannot_use_is_named_and_its_input_is_any_text(
    declared: object, why: str
) -> None:
    grammar, found = input_format(declared)
    assert grammar is None
    assert found is not None
    assert why in found
    tool = declared_tool(
        "exec", "", None, validate_schemas=True, form=CALL_CUSTOM, input_format_declared=declared
    )
    assert isinstance(tool, DeclaredTool)
    assert (tool.grammar, tool.schema_problem) == (None, found)
    assert judge([tool], [("call_1", "exec", "")])  # not refusing every response


def test_without_validate_schemas_the_grammar_is_not_checked() -> None:
    declared = {"type": "grammar", "syntax": "lark", "definition": EXEC_GRAMMAR}
    tool = declared_tool(
        "exec", "", None, validate_schemas=False, form=CALL_CUSTOM, input_format_declared=declared
    )
    assert isinstance(tool, DeclaredTool)
    assert tool.grammar is None
    assert judge([tool], [("call_1", "exec", "")])


def test_each_grammar_is_compiled_once_from_any_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[InputFormat] = []
    real = grammar_module._compile

    def counting(found: InputFormat) -> Any:
        compiled.append(found)
        return real(found)

    monkeypatch.setattr(grammar_module, "_kept", {})
    monkeypatch.setattr(grammar_module, "_compile", counting)
    found = InputFormat("lark", APPLY_PATCH_GRAMMAR)
    answers: list[str | None] = []

    def check() -> None:
        for _ in range(20):
            checker = grammar_check(found)
            assert not isinstance(checker, str)
            answers.append(checker.problem(PATCH))
            answers.append(checker.problem(""))

    threads = [threading.Thread(target=check) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(compiled) == 1
    assert answers.count(None) == 80
    assert len(answers) == 160


def test_a_check_that_takes_too_long_refuses_the_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grammar_module, "MAX_CHECK_SECONDS", -1.0)
    long = "await tools.exec_command({cmd: 'ls'});\n" * 40
    assert problem("lark", EXEC_GRAMMAR, long) == (
        "could not be checked against its lark grammar in time"
    )
    assert problem("lark", EXEC_GRAMMAR, "ls") is None  # within one piece: checked whole


def test_an_ambiguous_grammar_is_not_checked_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A grammar a client may declare whose Earley rows grow with the input: one piece of
    # 400 bytes took 8.7 s, then hit llguidance's row bound and read as "does not match".
    # Fed in small pieces, the time bound is looked at often enough, and a refusal for a
    # bound says it could not be checked: a valid sentence is never called invalid.
    monkeypatch.setattr(grammar_module, "MAX_CHECK_SECONDS", 0.2)
    answer = problem("lark", 'start: x\nx: "a" | x x | x x x', "a" * 400)
    assert answer is not None
    assert answer.startswith("could not be checked against its lark grammar"), answer


def test_the_kept_grammars_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grammar_module, "_kept", {})
    for number in range(grammar_module._KEPT + 10):
        assert not isinstance(grammar_check(InputFormat("regex", f"a{number}")), str)
    assert len(grammar_module._kept) == grammar_module._KEPT


# --- the gate ---------------------------------------------------------------------------------


def exec_tools() -> list[DeclaredTool]:
    tools = []
    for name, definition in (("exec", EXEC_GRAMMAR), ("apply_patch", APPLY_PATCH_GRAMMAR)):
        declared = {"type": "grammar", "syntax": "lark", "definition": definition}
        tool = declared_tool(
            name, "", None, validate_schemas=True, form=CALL_CUSTOM, input_format_declared=declared
        )
        assert isinstance(tool, DeclaredTool)
        assert tool.schema_problem is None
        tools.append(tool)
    return tools


def judge(tools: list[Any], calls: list[tuple[str, str, str]]) -> bool:
    """Stream `calls` (id, tool, input) as custom calls and complete: True when released."""
    gate = ResponseGate(tools, lambda event: None)
    gate.accept(ResponseStarted(response_id="resp_1"))
    for number, (call_id, name, text) in enumerate(calls):
        key = f"ctc_{number}"
        gate.accept(ToolCallStarted(key, call_id, name, form=CALL_CUSTOM))
        gate.accept(ToolArgumentsDelta(key, text))
    output = tuple(
        OutputCall(f"ctc_{number}", call_id, name, text, "", CALL_CUSTOM)
        for number, (call_id, name, text) in enumerate(calls)
    )
    decision = gate.accept(ResponseCompleted(finish_reason=FINISH_WITH_CALLS, output=output))
    assert decision is not None
    assert [call.arguments_json for call in decision.message.tool_calls] == [c[2] for c in calls]
    return True


def test_a_batch_of_a_valid_exec_call_and_an_empty_one_releases_nothing() -> None:
    tools = exec_tools()
    assert judge(tools, [("call_1", "exec", "await tools.exec_command({cmd: 'ls'})")])
    with pytest.raises(InvalidBatch) as caught:
        judge(
            tools,
            [("call_1", "exec", "await tools.exec_command({cmd: 'ls'})"), ("call_2", "exec", "")],
        )
    assert caught.value.kind is FailureKind.INVALID_BATCH
    assert [(p.call_id, p.problem) for p in caught.value.problems] == [
        (
            "call_2",
            "custom tool 'exec' input does not match its lark grammar (the input is incomplete)",
        )
    ]
    assert str(caught.value).startswith(
        "invalid_batch: batch rejected, nothing executed: exec (call_2): custom tool 'exec'"
    )


def test_a_broken_patch_beside_a_valid_command_releases_nothing() -> None:
    tools = exec_tools()
    assert judge(tools, [("call_1", "exec", "ls"), ("call_2", "apply_patch", PATCH)])
    broken = "*** Begin Patch\n*** Add File: x.py\nprint(1)\n*** End Patch\n"  # no '+'
    with pytest.raises(InvalidBatch) as caught:
        judge(tools, [("call_1", "exec", "ls"), ("call_2", "apply_patch", broken)])
    [found] = caught.value.problems
    assert found.problem == "custom tool 'apply_patch' input does not match its lark grammar"
    # With --recover the model is told which call was wrong and that the other did not run.
    recovery = caught.value.recovery
    assert recovery is not None
    assert recovery.observations[1].startswith("error: call rejected, not executed: custom")
    assert recovery.observations[0].startswith("error: not executed because another call")
