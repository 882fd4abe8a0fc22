"""vcrpy / pytest-recording cassettes (YAML or JSON, one exchange per interaction) as
cassettes."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from .format import CASSETTE_SUFFIX, CassetteError
from .import_bodies import BodyBudget, _decoded
from .imported import (
    Imported,
    Skipped,
    Sources,
    _cassette,
    _check_headers,
    _is_event_stream,
    _request_json,
    _split_url,
    protocol_of_path,
)


def _yaml(text: str, where: str) -> object:
    try:
        import yaml
    except ImportError:  # pragma: no cover - a dependency of lockgate
        raise CassetteError(f"{where}: reading YAML cassettes needs PyYAML") from None

    class _Loader(yaml.SafeLoader):
        """The safe loader (which already reads `!!binary` as bytes), also reading the
        Python tags some vcrpy versions write for bytes and text (`!!python/bytes`,
        `!!python/unicode`, `!!python/str`) as data, never as objects. Aliases are refused:
        recorders write none, and a few kilobytes of nested aliases expand without bound."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.events.AliasEvent):
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, "YAML aliases are not read", event.start_mark
                )
            return super().compose_node(parent, index)

    def _bytes(loader: yaml.SafeLoader, node: yaml.Node) -> bytes:
        value = loader.construct_scalar(node)  # type: ignore[arg-type]
        try:
            return base64.b64decode(str(value))
        except (binascii.Error, ValueError):
            raise yaml.constructor.ConstructorError(
                None, None, "!!python/bytes is not base64", node.start_mark
            ) from None

    def _str(loader: yaml.SafeLoader, node: yaml.Node) -> str:
        return str(loader.construct_scalar(node))  # type: ignore[arg-type]

    _Loader.add_constructor("tag:yaml.org,2002:python/bytes", _bytes)
    _Loader.add_constructor("tag:yaml.org,2002:python/unicode", _str)
    _Loader.add_constructor("tag:yaml.org,2002:python/str", _str)
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: data, never objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise CassetteError(f"{where}{line}: not a YAML cassette ({problem})") from None
    except RecursionError:
        raise CassetteError(f"{where}: nested too deeply") from None


def _header_pairs(raw: object, where: str) -> list[tuple[str, str]]:
    """vcrpy headers (`{name: [value, …]}` or `{name: value}`) as pairs in order."""
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise CassetteError(f"{where}: `headers` is not a mapping")
    pairs: list[tuple[str, str]] = []
    for name, values in raw.items():
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(name, str) or isinstance(value, Mapping | list):
                raise CassetteError(f"{where}: header {name!r} is not text")
            pairs.append((name, str(value)))
    _check_headers(pairs, where)
    return pairs


def _body_bytes(raw: object, where: str) -> bytes:
    if isinstance(raw, Mapping):
        raw = raw.get("string", b"")
    if raw is None:
        return b""
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        try:
            return raw.encode("utf-8")
        except UnicodeEncodeError:
            raise CassetteError(f"{where}: the body holds a lone surrogate") from None
    raise CassetteError(f"{where}: the response body is neither text nor `!!binary`")


def _status(raw: object, where: str) -> int:
    code = raw.get("code") if isinstance(raw, Mapping) else raw
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
        raise CassetteError(f"{where}: the response status is not an HTTP status")
    return code


def _interaction(
    raw: object, where: str, name: str, protocol: str | None, budget: BodyBudget
) -> Imported | Skipped:
    if not isinstance(raw, Mapping):
        raise CassetteError(f"{where}: an interaction is not a mapping")
    request, response = raw.get("request"), raw.get("response")
    if not isinstance(request, Mapping) or not isinstance(response, Mapping):
        raise CassetteError(f"{where}: an interaction needs a `request` and a `response`")
    uri = request.get("uri")
    method = request.get("method", "POST")
    if not isinstance(uri, str) or not isinstance(method, str):
        raise CassetteError(f"{where}: the request needs a `uri` and a `method`")
    status = _status(response.get("status", response.get("status_code")), where)
    headers = _header_pairs(response.get("headers"), where)
    body = _body_bytes(response.get("body"), where)
    spoken = protocol_of_path(_split_url(uri)[1])
    if spoken is None and protocol is None:
        path = _split_url(uri)[1]
        return Skipped(
            where,
            f"{method.upper()} {path} is no protocol lockgate speaks "
            "(give --protocol to import it as one)",
        )
    chosen = protocol or spoken
    assert chosen is not None
    if method.upper() != "POST":
        return Skipped(where, f"a {method.upper()} request, not a model request")
    decoded = _decoded(body, headers, where, budget)
    if isinstance(decoded, str):
        return Skipped(where, decoded)
    if status < 400 and not _is_event_stream(headers):
        return Skipped(where, f"HTTP {status} without an event stream (not a streamed response)")
    budget.take(len(decoded), where)
    cassette = _cassette(
        chosen, uri, method, _request_json(request.get("body")), status, headers, decoded, where
    )
    return Imported(name, cassette, where)


def _vcr(
    document: Mapping[str, Any], where: str, stem: str, protocol: str | None, budget: BodyBudget
) -> Sources:
    interactions = document.get("interactions")
    if not isinstance(interactions, list):
        raise CassetteError(f"{where}: `interactions` is not a list")
    imported: list[Imported] = []
    skipped: list[Skipped] = []
    for index, raw in enumerate(interactions):
        name = f"{stem}-{index}{CASSETTE_SUFFIX}"
        result = _interaction(raw, f"{where}#{index}", name, protocol, budget)
        if isinstance(result, Imported):
            imported.append(result)
        else:
            skipped.append(result)
    if not interactions:
        skipped.append(Skipped(where, "no interactions"))
    return Sources(tuple(imported), tuple(skipped))
