"""Tool schemas as real tools declare them (issue 27, the schema items): a `$ref` that does
not resolve within the schema makes it unusable at declaration (its calls are then checked
as a JSON object, instead of every call failing as `internal_error`), and nothing is ever
retrieved for one; draft-04 and draft-07 keywords are read in their draft — the one
`$schema` names, else the one the keywords unambiguously belong to — instead of making the
whole schema unusable."""

from __future__ import annotations

import contextlib
import copy
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft4Validator, Draft7Validator, Draft202012Validator
from referencing.exceptions import Unresolvable

from lockgate.conversation import ToolSpec
from lockgate.gateway import DeclaredTool, declared_tool
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.proxy import Accepted, Refused
from lockgate.schemas import schema_validator, unresolvable_reference, validator_class
from lockgate.scripted.script import Turn

from .support import gate_turn, run
from .test_gateways import verdict


@contextlib.contextmanager
def counting_server() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that serves a schema and counts the requests it gets."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = json.dumps({"type": "string"}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def tool(schema: dict[str, Any]) -> DeclaredTool:
    found = declared_tool("t", "", schema, validate_schemas=True)
    assert isinstance(found, DeclaredTool)
    return found


# --- $ref ---------------------------------------------------------------------------------------


def test_a_remote_ref_is_unusable_and_nothing_is_ever_retrieved() -> None:
    with counting_server() as (url, hits):
        schema = {"type": "object", "properties": {"a": {"$ref": f"{url}/string.json"}}}
        declared = tool(schema)
        assert declared.schema_problem == (
            f"its $ref '{url}/string.json' does not resolve within the schema "
            "(nothing is retrieved)"
        )
        assert verdict((declared,), "t", '{"a": 12}') == "accepted"  # a JSON object only
        # The gate's validator never fetches either (jsonschema's default does): a tool of
        # lockgate's own with such a schema fails its check, having asked nothing.
        own = (ToolSpec("t", "", schema),)
        with pytest.raises(Unresolvable):
            verdict(own, "t", '{"a": 12}')
        with pytest.raises(Unresolvable):
            list(schema_validator(schema).iter_errors({"a": 12}))
    assert hits == []


@pytest.mark.parametrize(
    "reference",
    ["#/$defs/missing", "#/definitions/missing", "other.json", "#nowhere", "urn:x:y"],
)
def test_a_dangling_ref_is_unusable_at_declaration(reference: str) -> None:
    declared = tool({"type": "object", "properties": {"a": {"$ref": reference}}})
    assert declared.schema_problem is not None
    assert f"its $ref {reference!r} does not resolve" in declared.schema_problem
    assert verdict((declared,), "t", '{"a": 1}') == "accepted"


def test_refs_that_resolve_within_the_schema_stay_usable_and_are_enforced() -> None:
    schema = {
        "$id": "https://tools.example/root",
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/name"},
            "b": {"$ref": "#/definitions/count"},
            "c": {
                "$id": "https://tools.example/nested",  # the base moves: its own $defs
                "$defs": {"flag": {"type": "boolean"}},
                "$ref": "#/$defs/flag",
            },
            "d": {"$ref": "https://tools.example/root#/$defs/name"},
            "$ref": {"type": "string"},  # a property named so: no reference
        },
        "$defs": {"name": {"type": "string"}},
        "definitions": {"count": {"type": "integer"}},
        "enum": [{"$ref": "http://data.example/not-a-reference"}],  # data, not a schema
    }
    assert unresolvable_reference(schema) is None
    declared = tool({key: value for key, value in schema.items() if key != "enum"})
    assert declared.schema_problem is None
    assert verdict((declared,), "t", '{"a": "x", "b": 1, "c": true, "d": "y"}') == "accepted"
    for bad in ('{"a": 1}', '{"b": "x"}', '{"c": 1}', '{"d": 2}', '{"$ref": 3}'):
        assert verdict((declared,), "t", bad) == "invalid_batch", bad


def test_a_dangling_ref_no_longer_refuses_every_call_through_the_engine() -> None:
    request = {
        "model": "m",
        "stream": True,
        "tools": [
            {
                "type": "function",
                "name": "edit",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"$ref": "#/$defs/missing"}},
                },
            }
        ],
    }
    builder = ResponseBuilder("resp_ref").created().call("fc_1", "call_1", "edit", {"path": "a"})
    turn = Turn(events=tuple(copy.deepcopy(event) for event in builder.completed().events))
    gated = run(gate_turn("responses", turn, request))
    assert isinstance(gated.outcome, Accepted), (
        gated.outcome.refusal if isinstance(gated.outcome, Refused) else None
    )


# --- dialects -----------------------------------------------------------------------------------

DRAFT4_EXCLUSIVE = {
    "type": "object",
    "properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
}
DRAFT7_STATED = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "pair": {"type": "array", "items": [{"type": "string"}], "additionalItems": False}
    },
}
DEPENDENCIES = {
    "type": "object",
    "properties": {"card": {"type": "string"}, "billing": {"type": "string"}},
    "dependencies": {"card": ["billing"]},
}
DEFINITIONS = {
    "type": "object",
    "properties": {"mode": {"$ref": "#/definitions/mode"}},
    "definitions": {"mode": {"enum": ["fast", "safe"]}},
}


@pytest.mark.parametrize(
    ("schema", "dialect", "good", "bad"),
    [
        (DRAFT4_EXCLUSIVE, Draft4Validator, '{"n": 0.5}', '{"n": 0}'),
        (DRAFT7_STATED, Draft7Validator, '{"pair": ["a"]}', '{"pair": ["a", "b"]}'),
        (
            {**DRAFT4_EXCLUSIVE, "$schema": "http://json-schema.org/draft-04/schema#"},
            Draft4Validator,
            '{"n": 1}',
            '{"n": -1}',
        ),
        (DEPENDENCIES, Draft7Validator, '{"card": "x", "billing": "y"}', '{"card": "x"}'),
        (DEFINITIONS, Draft202012Validator, '{"mode": "fast"}', '{"mode": "slow"}'),
        (
            {
                "type": "object",
                "properties": {"p": {"type": "array", "items": [{"type": "integer"}]}},
            },
            Draft7Validator,
            '{"p": [1, "anything"]}',
            '{"p": ["x"]}',
        ),
    ],
)
def test_older_drafts_keywords_are_read_in_their_draft(
    schema: dict[str, Any], dialect: type, good: str, bad: str
) -> None:
    assert validator_class(schema) is dialect
    declared = tool(schema)
    assert declared.schema_problem is None
    assert verdict((declared,), "t", good) == "accepted"
    assert verdict((declared,), "t", bad) == "invalid_batch"


def test_a_2020_12_schema_and_an_ambiguous_mix_are_read_as_2020_12() -> None:
    modern = {
        "type": "object",
        "properties": {"p": {"type": "array", "prefixItems": [{"type": "integer"}]}},
        "dependentRequired": {"p": ["q"]},
    }
    assert validator_class(modern) is Draft202012Validator
    assert verdict((tool(modern),), "t", '{"p": [1]}') == "invalid_batch"  # q is required
    mixed = {**DRAFT4_EXCLUSIVE, "$defs": {}}
    assert validator_class(mixed) is Draft202012Validator
    problem = tool(mixed).schema_problem
    assert problem is not None
    assert problem.startswith("not a valid JSON Schema (")
    # A keyword's name as a property's name is no keyword.
    named = {"type": "object", "properties": {"dependencies": {"type": "string"}}}
    assert validator_class(named) is Draft202012Validator
