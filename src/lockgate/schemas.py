"""Which JSON Schema dialect a tool's schema is read in, and the validator the gate checks
arguments with — which never retrieves anything.

Real tools declare schemas of every draft: `definitions`, `dependencies`, draft-04's boolean
`exclusiveMinimum`, draft-07's array `items`, and `$schema` naming the draft. The dialect:

- the one `$schema` names, where it names a draft jsonschema knows (draft-03 to 2020-12);
- otherwise Draft 2020-12, unless the schema uses keywords whose meaning only an older draft
  gives (`dependencies`, `additionalItems`, an array `items`, a boolean `exclusiveMinimum` /
  `exclusiveMaximum`) and none that only 2019-09 and later have (`$defs`, `prefixItems`,
  `dependentRequired`, `unevaluatedProperties` …): then draft-07, or draft-04 where a boolean
  `exclusiveMinimum`/`exclusiveMaximum` says so. A schema that mixes both is read as 2020-12
  (and its metaschema check then says what is wrong).

References: a `$ref` resolves within the schema itself (and to the drafts' own
metaschemas), never over the network — the default of jsonschema, which fetches an
`http://…` reference with `urllib`, would let whoever declares a tool make the proxy
request any address. `unresolvable_reference` names a reference that cannot be resolved so,
at declaration, instead of every call to that tool failing when it is checked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import (
    Draft4Validator,
    Draft7Validator,
    Draft202012Validator,
)
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

__all__ = ["schema_validator", "unresolvable_reference", "validator_class"]

# Keywords whose values are data, never subschemas (not searched for keywords or `$ref`s).
_DATA = frozenset({"enum", "const", "default", "examples"})
# Keywords whose values map names to subschemas (the names are no keywords).
_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
_LEGACY = frozenset({"dependencies", "additionalItems"})
_MODERN = frozenset(
    {
        "$defs",
        "prefixItems",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedProperties",
        "unevaluatedItems",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "minContains",
        "maxContains",
    }
)


def _subschemas(schema: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every object in a schema position of `schema` (itself first), data left out."""
    stack: list[object] = [schema]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        if type(node) is list:
            extend(node)
            continue
        if type(node) is not dict and not isinstance(node, Mapping):
            continue
        yield node
        for key, value in node.items():
            kind = type(value)
            if kind is dict or kind is list:
                if key in _MAPS and kind is dict:
                    extend(value.values())
                elif key not in _DATA:
                    push(value)
            elif isinstance(value, Mapping | list):
                if key in _MAPS and isinstance(value, Mapping):
                    extend(value.values())
                elif key not in _DATA:
                    push(value)


def validator_class(schema: Mapping[str, Any]) -> type[Validator]:
    """The dialect `schema` is read in (see the module's description)."""
    stated = schema.get("$schema")
    if isinstance(stated, str):
        known: type[Validator] | None = validator_for(schema, default=None)  # type: ignore[arg-type]
        if known is not None:
            return known
    legacy = modern = draft4 = False
    for node in _subschemas(schema):
        if not modern and not _MODERN.isdisjoint(node):
            modern = True
        if not _LEGACY.isdisjoint(node) or type(node.get("items")) is list:
            legacy = True
        if type(node.get("exclusiveMinimum")) is bool or type(node.get("exclusiveMaximum")) is bool:
            legacy = draft4 = True
    if legacy and not modern:
        return Draft4Validator if draft4 else Draft7Validator
    return Draft202012Validator


def schema_validator(
    schema: Mapping[str, Any], dialect: type[Validator] | None = None
) -> Validator:
    """The validator of arguments against `schema`, in its dialect (`dialect`, where it was
    worked out already: `gateway.DeclaredTool.dialect`); its references resolve
    within the schema and the drafts' metaschemas only (nothing is retrieved: an empty
    registry, which jsonschema combines with the metaschemas, and whose retrieval fails)."""
    from referencing import Registry

    return (dialect or validator_class(schema))(schema, registry=Registry())


def unresolvable_reference(schema: Mapping[str, Any]) -> str | None:
    """A `$ref` of `schema` that cannot be resolved without retrieving anything (a remote
    address, a pointer to nothing), or None when every one resolves. Each is looked up
    where the validator would look it up: from its own subschema (whose `$id` may have
    moved the base)."""
    from referencing import Specification
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import specification_with

    cls = validator_class(schema)
    validator = schema_validator(schema)
    meta = cls.META_SCHEMA
    dialect = str(meta.get("$id") or meta.get("id") or "urn:unknown-dialect")
    specification: Any = specification_with(dialect, default=Specification.OPAQUE)
    found: list[tuple[object, Any]] = [(schema, validator._resolver)]  # type: ignore[attr-defined]
    while found:
        node, at = found.pop()
        if isinstance(node, list):
            found.extend((item, at) for item in node)
            continue
        if not isinstance(node, Mapping):
            continue
        at = at.in_subresource(specification.create_resource(node))
        reference = node.get("$ref")
        if isinstance(reference, str):
            try:
                at.lookup(reference)
            except Unresolvable:
                return reference
        for key, value in node.items():
            if key in _DATA:
                continue
            if key in _MAPS and isinstance(value, Mapping):
                found.extend((item, at) for item in value.values())
            elif isinstance(value, Mapping | list):
                found.append((value, at))
    return None
