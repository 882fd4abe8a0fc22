"""The real-streams JSON files (one recorded exchange each) as cassettes. A binary body
(Bedrock's event stream) is its `body_b64`; a streamed one whose recorder kept no content
type is given the event stream's."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from ..eventstream import MEDIA_TYPE as EVENTSTREAM_MEDIA_TYPE
from .format import CASSETTE_SUFFIX, CassetteError
from .import_bodies import BodyBudget
from .imported import PROTOCOLS, Imported, Skipped, Sources, _cassette, _check_headers

_WHAT_URL = re.compile(r"\((?:POST|GET|PUT) (\S+?)\)")

_DEFAULT_PATHS = {
    "bedrock": "/model/model/converse-stream",
    "responses": "/v1/responses",
    "chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/model:streamGenerateContent",
}


def _real_stream(
    document: Mapping[str, Any], where: str, stem: str, protocol: str | None, budget: BodyBudget
) -> Sources:
    recorded = document.get("protocol")
    if not isinstance(recorded, str):
        raise CassetteError(f"{where}: `protocol` is missing or not a string")
    if recorded not in PROTOCOLS:
        return Sources((), (Skipped(where, f"protocol {recorded!r} is not one lockgate speaks"),))
    if protocol is not None and recorded != protocol:
        return Sources((), (Skipped(where, f"a {recorded} recording, not --protocol {protocol}"),))
    status = document.get("status")
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise CassetteError(f"{where}: `status` is not an HTTP status")
    body = document.get("body")
    binary = document.get("body_b64")
    if body is None and isinstance(binary, str):  # a binary body (Bedrock's event stream)
        try:
            raw: bytes | None = base64.b64decode(binary, validate=True)
        except (binascii.Error, ValueError):
            raise CassetteError(f"{where}: `body_b64` is not base64") from None
    elif isinstance(body, str):
        raw = None
    else:
        raise CassetteError(f"{where}: `body` is missing or not a string")
    headers = document.get("headers") or {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise CassetteError(f"{where}: `headers` must be an object of strings")
    _check_headers(headers.items(), where)
    source = document.get("source")
    what = source.get("what") if isinstance(source, Mapping) else None
    found = _WHAT_URL.search(what) if isinstance(what, str) else None
    method = "POST"
    url = _DEFAULT_PATHS[recorded]
    if found is not None:
        url = found.group(1)
        method = found.group(0)[1:].split(" ", 1)[0]
    if raw is not None:
        data = raw
    else:
        assert isinstance(body, str)
        try:
            data = body.encode("utf-8")
        except UnicodeEncodeError:
            raise CassetteError(f"{where}: `body` holds a lone surrogate") from None
    budget.take(len(data), where)
    pairs = list(headers.items())
    if (
        raw is not None
        and 200 <= status < 300
        and not any(name.lower() == "content-type" for name, _ in pairs)
    ):
        pairs.append(("content-type", EVENTSTREAM_MEDIA_TYPE))  # a recorder that kept none
    cassette = _cassette(
        recorded,
        url,
        method,
        document.get("request"),
        status,
        pairs,
        data,
        where,
    )
    return Sources((Imported(stem + CASSETTE_SUFFIX, cassette, where),), ())
