"""The events (`events.py`): `TextBuffer` semantics and what `fast_init` keeps."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate import events as events_module
from lockgate.events import TextBuffer, fast_init
from lockgate.sse import ServerSentEvent


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=70), max_size=600))
def test_text_buffer_is_the_joined_text_in_few_blocks(fragments: list[str]) -> None:
    buffer = TextBuffer()
    for fragment in fragments:
        buffer.append(fragment)
        blocks = buffer._blocks
        # Block lengths at least halve from one block to the next: O(log n) blocks.
        assert all(len(a) >= 2 * len(b) for a, b in itertools.pairwise(blocks))
        assert len(buffer._pending) < TextBuffer.FOLD
    assert buffer.chars == sum(map(len, fragments))
    assert buffer.value() == "".join(fragments)
    buffer.append("tail")
    assert buffer.value() == "".join(fragments) + "tail"


def fast_event_classes() -> Iterator[type[Any]]:
    for value in vars(events_module).values():
        if (
            isinstance(value, type)
            and dataclasses.is_dataclass(value)
            and value.__module__ == events_module.__name__
        ):
            yield value
    yield ServerSentEvent


@pytest.mark.parametrize("cls", list(fast_event_classes()), ids=lambda cls: cls.__name__)
def test_fast_init_keeps_the_dataclass_signature(cls: type[Any]) -> None:
    """Parameters in field order (kw-only ones after `*`), with the fields' defaults."""
    fields = dataclasses.fields(cls)
    expected = [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY
            if field.kw_only
            else inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=inspect.Parameter.empty
            if field.default is dataclasses.MISSING
            else field.default,
        )
        for field in fields
    ]
    expected.sort(key=lambda p: p.kind)  # kw-only after the positional ones, stable
    parameters = list(inspect.signature(cls).parameters.values())
    assert [(p.name, p.kind, p.default) for p in parameters] == [
        (p.name, p.kind, p.default) for p in expected
    ]


def test_fast_init_keeps_value_semantics() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Base:
        response_id: str | None = None

    @dataclasses.dataclass(frozen=True, slots=True)
    class Plain(Base):
        text: str
        kind: str = "summary"

    @fast_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Fast(Base):
        text: str
        kind: str = "summary"

    for args, kwargs in [(("a",), {}), (("a", "raw"), {"response_id": "r"}), ((), {"text": "b"})]:
        plain, fast = Plain(*args, **kwargs), Fast(*args, **kwargs)
        assert repr(fast) == repr(plain).replace("Plain", "Fast")
        assert fast == Fast(*args, **kwargs)
        assert hash(fast) == hash(Fast(*args, **kwargs))
        assert dataclasses.astuple(fast) == dataclasses.astuple(plain)
        assert dataclasses.replace(fast, text="z") == Fast(
            "z", fast.kind, response_id=fast.response_id
        )
    assert Fast("a") != cast(Any, Plain("a"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        Fast("a").text = "b"  # type: ignore[misc]
    bad: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((), {}),
        (("a", "b", "c"), {}),
        (("a",), {"nope": 1}),
    ]
    for bad_args, bad_kwargs in bad:
        with pytest.raises(TypeError):
            Fast(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError):
            Plain(*bad_args, **bad_kwargs)


def test_fast_init_refuses_what_it_cannot_copy() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        text: str

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithPostInit:
        text: str

        def __post_init__(self) -> None:
            pass

    for cls in (NoSlots, WithPostInit):
        with pytest.raises(TypeError):
            fast_init(cls)
