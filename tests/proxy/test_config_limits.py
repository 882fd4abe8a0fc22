"""What a config file may not be (issue 27): nested deeper than 32 levels (PyYAML's scanner
slows with the square of the nesting, its composer recurses: a minute of CPU, then
`RecursionError`), refused while parsing in one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.proxy.config import MAX_CONFIG_DEPTH, ConfigError, settings_from_text

from ..helpers import CLI, usage_error_line

DEEP = {
    "flow sequences": "routes: " + "[" * 3000 + "]" * 3000 + "\n",
    "flow mappings": "routes: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
    "block mappings": "".join(" " * level + f"k{level}:\n" for level in range(1200)),
}


@pytest.mark.parametrize("text", list(DEEP.values()), ids=list(DEEP))
def test_a_deeply_nested_file_is_refused_while_parsing(text: str) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_from_text(text, "c.yaml")
    message = str(raised.value)
    assert message.startswith("c.yaml:")
    assert message.endswith(f": nested more than {MAX_CONFIG_DEPTH} levels deep")
    assert "\n" not in message


def test_nesting_up_to_the_bound_is_read_as_usual() -> None:
    # The deepest a config is, then as deep as allowed: a value's own error, not the bound.
    nested = "{a: " * (MAX_CONFIG_DEPTH - 3) + "1" + "}" * (MAX_CONFIG_DEPTH - 3)
    text = f"routes:\n  - {{name: a, upstream: 'http://x', limits: {nested}}}\n"
    with pytest.raises(ConfigError, match=r"routes\[0\]\.limits\.a: unknown key"):
        settings_from_text(text, "c.yaml")


def test_the_command_says_it_in_one_line_exit_2(cli: CLI, tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(DEEP["flow sequences"])
    result = cli("proxy", "--config", str(path), "--check")
    line = usage_error_line(result)
    assert line == f"lockgate: {path}:1: nested more than {MAX_CONFIG_DEPTH} levels deep"
