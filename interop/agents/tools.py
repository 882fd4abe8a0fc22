"""The agent's own tools, read from its request: which one is its shell, and the three calls
the hostile server makes with them.

Where each protocol declares tools: Responses in the top-level `tools` and in the input
items that carry tools (Codex's `additional_tools`), `namespace` groups flattened with their
namespace kept; Chat `tools[].function`; Anthropic `tools[]` (`input_schema`; Bedrock's
invoke body too); Bedrock Converse `toolConfig.tools[].toolSpec` (`inputSchema.json`); Gemini
`tools[].functionDeclarations[]` (`parametersJsonSchema` or `parameters`).

The shells the agents declare (the first one found wins):

- custom `exec` (Codex, default model; code mode): JavaScript input,
  `await tools.exec_command({cmd: …})`;
- `exec_command` (Codex, `-m gpt-5.5`): `{"cmd": …}`;
- `shell_command` (Codex, older models): `{"command": …}`;
- `shell` (Codex, older releases): `{"command": ["bash", "-lc", …]}`;
- `Bash` (Claude Code), `run_shell_command` (Gemini CLI): `{"command": …, "description": …}`;
- `bash` (the AI SDK agent, `ai_sdk_agent.mjs`): `{"command": …}`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .wire import Call

__all__ = [
    "UNDECLARED_TOOL",
    "DeclaredTool",
    "ShellCalls",
    "declared_tools",
    "has_tool_result",
    "shell_calls",
]

UNDECLARED_TOOL = "lockgate_undeclared_tool"


@dataclass(frozen=True)
class DeclaredTool:
    name: str
    custom: bool  # a Responses custom (freeform) tool
    namespace: str | None
    schema: object  # its parameters' schema (None for a custom tool)
    grammar: bool = False  # a custom tool whose `format` is a grammar (lark or regex)

    def required(self) -> list[str]:
        if not isinstance(self.schema, dict):
            return []
        required = self.schema.get("required")
        return [name for name in required if isinstance(name, str)] if required else []


def _responses_tools(entries: object, namespace: str | None = None) -> Iterator[DeclaredTool]:
    if not isinstance(entries, list):
        return
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        name = entry.get("name")
        if kind == "namespace" and isinstance(name, str):
            yield from _responses_tools(entry.get("tools"), name)
        elif kind == "function" and isinstance(name, str):
            yield DeclaredTool(name, False, namespace, entry.get("parameters"))
        elif kind == "custom" and isinstance(name, str):
            form = entry.get("format")
            grammar = isinstance(form, dict) and form.get("type") == "grammar"
            yield DeclaredTool(name, True, namespace, None, grammar)


def declared_tools(protocol: str, body: dict[str, Any]) -> list[DeclaredTool]:
    """Every client tool the request declares (built-in tools left out)."""
    protocol = "anthropic" if protocol == "bedrock" else protocol  # Anthropic's body
    tools = body.get("tools")
    if protocol == "converse":  # Bedrock Converse: toolConfig.tools[].toolSpec
        config = body.get("toolConfig")
        tools = config.get("tools") if isinstance(config, dict) else None
    if protocol == "responses":
        found = list(_responses_tools(tools))
        items = body.get("input")
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and "tools" in item:
                    found.extend(_responses_tools(item.get("tools")))
        return found
    found = []
    if not isinstance(tools, list):
        return found
    for entry in tools:
        if not isinstance(entry, dict):
            continue
        if protocol == "chat":
            function = entry.get("function")
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                found.append(
                    DeclaredTool(function["name"], False, None, function.get("parameters"))
                )
        elif protocol == "anthropic":
            if isinstance(entry.get("name"), str) and "input_schema" in entry:
                found.append(DeclaredTool(entry["name"], False, None, entry["input_schema"]))
        elif protocol == "converse":
            spec = entry.get("toolSpec")
            if isinstance(spec, dict) and isinstance(spec.get("name"), str):
                schema = spec.get("inputSchema")
                found.append(
                    DeclaredTool(spec["name"], False, None, schema.get("json") if schema else None)
                )
        elif protocol == "gemini":
            for declaration in entry.get("functionDeclarations") or []:
                if isinstance(declaration, dict) and isinstance(declaration.get("name"), str):
                    schema = declaration.get("parametersJsonSchema", declaration.get("parameters"))
                    found.append(DeclaredTool(declaration["name"], False, None, schema))
    return found


def has_tool_result(protocol: str, body: dict[str, Any]) -> bool:
    """Whether the conversation already holds a tool's result (a later turn)."""
    if protocol == "responses":
        items = body.get("input")
        return isinstance(items, list) and any(
            isinstance(item, dict) and str(item.get("type", "")).endswith("_output")
            for item in items
        )
    if protocol == "chat":
        messages = body.get("messages")
        return isinstance(messages, list) and any(
            isinstance(message, dict) and message.get("role") == "tool" for message in messages
        )
    if protocol in ("anthropic", "bedrock"):
        messages = body.get("messages")
        if not isinstance(messages, list):
            return False
        return any(
            isinstance(block, dict) and block.get("type") == "tool_result"
            for message in messages
            if isinstance(message, dict) and isinstance(message.get("content"), list)
            for block in message["content"]
        )
    if protocol == "converse":
        messages = body.get("messages")
        return isinstance(messages, list) and any(
            isinstance(block, dict) and "toolResult" in block
            for message in messages
            if isinstance(message, dict) and isinstance(message.get("content"), list)
            for block in message["content"]
        )
    contents = body.get("contents")
    if not isinstance(contents, list):
        return False
    return any(
        isinstance(part, dict) and "functionResponse" in part
        for content in contents
        if isinstance(content, dict) and isinstance(content.get("parts"), list)
        for part in content["parts"]
    )


@dataclass(frozen=True)
class ShellCalls:
    """The calls the server makes with one agent's tools."""

    shell: DeclaredTool
    run: Call  # the valid call that creates the marker
    invalid: Call  # a declared tool called without a required argument
    undeclared: Call  # a tool the request did not declare
    # the custom shell called with an input its declared grammar refuses (empty: Codex's
    # `exec` grammar needs at least one character); None when the shell declares no grammar
    ungrammatical: Call | None = None


def _arguments(shell: DeclaredTool, command: str) -> str | None:
    if shell.custom:
        if shell.name != "exec":
            return None
        return f"await tools.exec_command({{cmd: {json.dumps(command)}}});\n"
    described = {"command": command, "description": "Create the marker file"}
    by_name: dict[str, object] = {
        "exec_command": {"cmd": command},
        "shell_command": {"command": command},
        "shell": {"command": ["bash", "-lc", command]},
        "Bash": described,
        "run_shell_command": described,
        "bash": {"command": command},
    }
    value = by_name.get(shell.name)
    return None if value is None else json.dumps(value)


_SHELL_ORDER = (
    "exec",
    "exec_command",
    "shell_command",
    "shell",
    "Bash",
    "run_shell_command",
    "bash",
)


def _call(tool: DeclaredTool, arguments: str, functions_namespace: bool) -> Call:
    namespace = tool.namespace
    if namespace == "functions" and not functions_namespace:
        namespace = None
    return Call(tool.name, arguments, custom=tool.custom, namespace=namespace)


def shell_calls(
    protocol: str, body: dict[str, Any], command: str, *, functions_namespace: bool = False
) -> ShellCalls | None:
    """The calls to make with the request's tools (None: it declares no shell).

    A call to a tool of a namespace names it (`"namespace": "clock"`), except Codex's
    `functions` namespace, which is named only with `functions_namespace`: Codex 0.171 runs
    a call to one of its tools with or without `"namespace": "functions"` (tried with `exec`
    and `wait`), and runs no other namespaced tool without its namespace."""
    tools = declared_tools(protocol, body)
    by_name = {tool.name: tool for tool in tools}
    for name in _SHELL_ORDER:
        shell = by_name.get(name)
        if shell is None:
            continue
        arguments = _arguments(shell, command)
        if arguments is None:
            continue
        break
    else:
        return None
    # A second call missing a required argument: the shell itself when it has a schema,
    # else the first declared function that requires something.
    invalid_tool = shell
    if shell.custom or not shell.required():
        candidates = [tool for tool in tools if not tool.custom and tool.required()]
        if candidates:
            invalid_tool = candidates[0]
    invalid = _call(invalid_tool, "" if invalid_tool.custom else "{}", functions_namespace)
    undeclared = Call(UNDECLARED_TOOL, json.dumps({"path": "README.md"}))
    ungrammatical = _call(shell, "", functions_namespace) if shell.grammar else None
    run = _call(shell, arguments, functions_namespace)
    return ShellCalls(shell, run, invalid, undeclared, ungrammatical)
