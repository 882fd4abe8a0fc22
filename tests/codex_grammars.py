"""Codex's real grammars for its custom (free-form) tools, as Codex 0.171.0 declares them
(`{"type": "custom", "format": {"type": "grammar", "syntax": "lark", "definition": …}}`):
byte for byte as its requests carry them (recorded through `interop/agents`: `exec` in the
`functions` namespace of the default model's `additional_tools` item, `apply_patch` in
`-m gpt-5.5`'s `tools`), also found in the `@openai/codex` package's binary (Apache-2.0).
`exec` is the default model's only way to act (code mode: JavaScript, an optional
`// @exec:` pragma line first); `apply_patch` is its file editor."""

EXEC_GRAMMAR = (
    "\n"
    "start: pragma_source | plain_source\n"
    "pragma_source: PRAGMA_LINE NEWLINE SOURCE\n"
    "plain_source: SOURCE\n"
    "\n"
    "PRAGMA_LINE: /[ \\t]*\\/\\/ @exec:[^\\r\\n]*/\n"
    "NEWLINE: /\\r?\\n/\n"
    "SOURCE: /[\\s\\S]+/\n"
)

APPLY_PATCH_GRAMMAR = (
    "start: begin_patch hunk+ end_patch\n"
    'begin_patch: "*** Begin Patch" LF\n'
    'end_patch: "*** End Patch" LF?\n'
    "\n"
    "hunk: add_hunk | delete_hunk | update_hunk\n"
    'add_hunk: "*** Add File: " filename LF add_line+\n'
    'delete_hunk: "*** Delete File: " filename LF\n'
    'update_hunk: "*** Update File: " filename LF change_move? change?\n'
    "\n"
    "filename: /(.+)/\n"
    'add_line: "+" /(.*)/ LF -> line\n'
    "\n"
    'change_move: "*** Move to: " filename LF\n'
    "change: (change_context | change_line)+ eof_line?\n"
    'change_context: ("@@" | "@@ " /(.+)/) LF\n'
    'change_line: ("+" | "-" | " ") /(.*)/ LF\n'
    'eof_line: "*** End of File" LF\n'
    "\n"
    "%import common.LF\n"
)


def custom_tool(name: str, syntax: str, definition: str) -> dict[str, object]:
    """A Responses custom tool declaring a grammar."""
    return {
        "type": "custom",
        "name": name,
        "description": f"the {name} tool",
        "format": {"type": "grammar", "syntax": syntax, "definition": definition},
    }


EXEC_TOOL = custom_tool("exec", "lark", EXEC_GRAMMAR)
APPLY_PATCH_TOOL = custom_tool("apply_patch", "lark", APPLY_PATCH_GRAMMAR)
