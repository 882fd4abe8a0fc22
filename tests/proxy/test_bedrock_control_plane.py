"""What Claude Code on Bedrock sends besides model requests, and the Anthropic-format AWS
endpoints, through a proxy that holds AWS credentials:

- **The control plane.** With `CLAUDE_CODE_SKIP_BEDROCK_AUTH=1` and `ANTHROPIC_BEDROCK_BASE_URL`
  at the proxy, Claude Code 2.1.332 sends `GET /inference-profiles?type=SYSTEM_DEFINED`
  (ListInferenceProfiles) at start and `GET /inference-profiles/{arn}` (GetInferenceProfile)
  for an application inference profile, to the same base URL. boto3's own `bedrock` client
  sends them here; a loopback upstream recomputes each signature with botocore (service
  `bedrock`) and answers 403 on a mismatch.
- **Anthropic Messages on AWS**: bedrock-runtime's `/anthropic/v1/messages` and Mantle's
  (`bedrock-mantle.{region}.api.aws/anthropic/v1/messages`) are gated as Anthropic Messages
  and signed for their service (`bedrock`, `bedrock-mantle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import boto3  # type: ignore[import-untyped]
import botocore.config  # type: ignore[import-untyped]
import pytest
from aiohttp import web
from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials  # type: ignore[import-untyped]

from lockgate.providers.anthropic.render import RENDERER as ANTHROPIC
from lockgate.providers.bedrock.gateway import GATEWAY
from lockgate.proxy.routes import PathProblem, control_plane_base, plain_path, takes_held_key
from lockgate.proxy.server import ProxyRecord, serving
from lockgate.proxy.settings import (
    AwsSigning,
    ProxySettings,
    RouteSettings,
    SecretSource,
    UpstreamSettings,
)
from lockgate.proxy.sigv4 import AwsSigner, service_for

from .support import request_for, tool_events
from .test_bedrock_sigv4 import ACCESS, REGION, SECRET, SESSION, TOKEN, verify
from .test_bedrock_sigv4 import aws_env as aws_env  # the fixture
from .test_server import ACCEPTED, INVALID_SECOND, gating, serve_app

APP_PROFILE = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3"
BACKING = "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-sonnet-4-5-v1:0"
HELD_KEY = "bedrock-api-key-HELD-0123456789"


def _settings(upstream: str, *, key: str | None = None) -> ProxySettings:
    held = (
        UpstreamSettings(upstream, key=SecretSource(value=key), key_header="authorization")
        if key is not None
        else UpstreamSettings(upstream, aws=AwsSigning(REGION))
    )
    route = RouteSettings("bedrock", "", held, gating())
    return ProxySettings((route,), client_token=SecretSource(value=TOKEN))


Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def control_plane_upstream() -> AsyncIterator[tuple[str, list[web.Request]]]:
    """The control plane's stand-in: 403 on a signature botocore does not recompute, else
    ListInferenceProfiles' or GetInferenceProfile's answer."""
    seen: list[web.Request] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        problem = verify(request, await request.read())
        if problem is not None:
            return web.json_response(
                {"message": problem, "__type": "InvalidSignatureException"}, status=403
            )
        if request.path == "/inference-profiles":
            return web.json_response({"inferenceProfileSummaries": []})
        return web.json_response(
            {
                "inferenceProfileName": "app",
                "inferenceProfileArn": APP_PROFILE,
                "inferenceProfileId": "a1b2c3",
                "models": [{"modelArn": BACKING}],
                "status": "ACTIVE",
                "type": "APPLICATION",
            }
        )

    async with serve_app(answer) as url:
        yield url, seen


def _control_client(url: str) -> Any:
    """boto3's control-plane client (`bedrock`) at the proxy, the client token added."""
    bedrock = boto3.client(
        "bedrock",
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )

    def add(request: Any, **_: Any) -> None:
        request.headers["x-lockgate-token"] = TOKEN

    bedrock.meta.events.register("before-sign.bedrock.*", add)
    return bedrock


@pytest.mark.usefixtures("aws_env")
async def test_claude_codes_inference_profile_look_ups_pass_signed_for_bedrock() -> None:
    records: list[ProxyRecord] = []
    async with (
        control_plane_upstream() as (upstream, seen),
        serving(_settings(upstream), records.append) as running,
    ):
        bedrock = _control_client(running.url)
        listed = await asyncio.to_thread(
            bedrock.list_inference_profiles, typeEquals="SYSTEM_DEFINED"
        )
        got = await asyncio.to_thread(
            bedrock.get_inference_profile, inferenceProfileIdentifier=APP_PROFILE
        )
    assert listed["inferenceProfileSummaries"] == []
    assert got["models"] == [{"modelArn": BACKING}]
    assert [(r.method, r.raw_path) for r in seen] == [
        ("GET", "/inference-profiles?type=SYSTEM_DEFINED"),
        ("GET", f"/inference-profiles/{quote(APP_PROFILE, safe='')}"),  # `:`, `/` once
    ]
    assert all("x-lockgate-token" not in r.headers for r in seen)
    assert [(r.outcome, r.protocol) for r in records] == [("forwarded", None)] * 2
    for secret in (SECRET, SESSION):
        assert secret not in repr(records)


@pytest.mark.usefixtures("aws_env")
async def test_a_control_plane_write_gets_no_held_credentials() -> None:
    """Only reads are look-ups: `POST /inference-profiles` (CreateInferenceProfile) is
    refused with 403 before anything goes upstream."""
    async with (
        control_plane_upstream() as (upstream, seen),
        serving(_settings(upstream)) as running,
        aiohttp.ClientSession() as session,
        session.post(
            f"{running.url}/inference-profiles",
            json={"inferenceProfileName": "x"},
            headers={"x-lockgate-token": TOKEN},
        ) as response,
    ):
        text = await response.text()
    assert response.status == 403
    assert "goes only with model requests" in text
    assert not seen


async def test_a_held_bedrock_api_key_goes_with_the_look_ups() -> None:
    seen: list[web.Request] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        return web.json_response({"inferenceProfileSummaries": []})

    async with (
        serve_app(answer) as upstream,
        serving(_settings(upstream, key=HELD_KEY)) as running,
        aiohttp.ClientSession() as session,
        session.get(
            f"{running.url}/inference-profiles?type=SYSTEM_DEFINED",
            headers={"x-lockgate-token": TOKEN, "amz-sdk-invocation-id": "1"},
        ) as response,
    ):
        assert response.status == 200
    [request] = seen
    assert request.headers["authorization"] == f"Bearer {HELD_KEY}"


def test_the_look_ups_go_to_the_control_planes_host() -> None:
    runtime = "https://bedrock-runtime.eu-west-1.amazonaws.com"
    assert control_plane_base(runtime, "GET", "/inference-profiles") == (
        "https://bedrock.eu-west-1.amazonaws.com"
    )
    fips = "https://bedrock-runtime-fips.us-gov-west-1.amazonaws.com"
    assert control_plane_base(fips, "GET", "/foundation-models/anthropic.x") == (
        "https://bedrock-fips.us-gov-west-1.amazonaws.com"
    )
    # Model requests, writes, other hosts: unchanged.
    assert control_plane_base(runtime, "POST", "/model/m/invoke") == runtime
    assert control_plane_base(runtime, "POST", "/inference-profiles") == runtime
    assert control_plane_base("http://127.0.0.1:9", "GET", "/inference-profiles") == (
        "http://127.0.0.1:9"
    )
    mantle = "https://bedrock-mantle.us-east-1.api.aws"
    assert control_plane_base(mantle, "GET", "/inference-profiles") == mantle


def test_the_held_key_goes_with_look_ups_only() -> None:
    assert takes_held_key("GET", "/inference-profiles")
    assert takes_held_key("GET", "/inference-profiles/" + quote(APP_PROFILE, safe=":"))
    assert takes_held_key("GET", "/foundation-models")
    assert not takes_held_key("POST", "/inference-profiles")
    assert not takes_held_key("DELETE", "/inference-profiles/x")
    assert not takes_held_key("GET", "/inference-profiles/x/tags")
    assert not takes_held_key("GET", "/v1/files/inference-profiles")


def test_an_encoded_slash_passes_inside_an_inference_profile_id_only() -> None:
    encoded = quote(APP_PROFILE, safe="")
    assert plain_path(f"/inference-profiles/{encoded}").endswith("profile%2Fa1b2c3")
    assert GATEWAY.encoded_slash_allowed(f"/bedrock/inference-profiles/{encoded}")
    for bad in (
        "/inference-profiles%2Fx",
        "/inference-profiles/..%2Fx",
        "/v1/files/a%2Fb",
        "/inference-profiles/a%2F%2Fb",
    ):
        with pytest.raises(PathProblem):
            plain_path(bad)


# --- Anthropic Messages on AWS -----------------------------------------------------------------


def test_each_aws_host_is_signed_for_its_own_service() -> None:
    assert service_for("https://bedrock-runtime.us-east-1.amazonaws.com/model/m/invoke") == (
        "bedrock"
    )
    assert service_for("https://bedrock.us-east-1.amazonaws.com/inference-profiles") == "bedrock"
    assert service_for("https://bedrock-mantle.us-east-1.api.aws/anthropic/v1/messages") == (
        "bedrock-mantle"
    )
    vpce = "https://vpce-0a1b.bedrock-mantle.us-east-1.vpce.amazonaws.com/anthropic/v1/messages"
    assert service_for(vpce) == "bedrock-mantle"
    assert service_for("https://aws-external-anthropic.us-west-2.api.aws/v1/messages") == (
        "aws-external-anthropic"
    )
    assert service_for("http://127.0.0.1:8080/anthropic/v1/messages") == "bedrock"


@pytest.mark.usefixtures("aws_env")
def test_a_mantle_request_is_signed_as_botocore_signs_for_bedrock_mantle() -> None:
    url = "https://bedrock-mantle.us-east-1.api.aws/anthropic/v1/messages?beta=true"
    body = b'{"model":"anthropic.claude-opus-4-8","max_tokens":8,"messages":[]}'
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    signer = AwsSigner.from_chain(REGION, None)
    added = signer.sign("POST", url, headers, body)
    sent = {name: value for name, value in added.items() if name != "Authorization"}
    request = AWSRequest(method="POST", url=url, headers={**headers, **sent}, data=body)
    request.context["timestamp"] = added["X-Amz-Date"]
    for service, matches in (("bedrock-mantle", True), ("bedrock", False)):
        auth = SigV4Auth(Credentials(ACCESS, SECRET, SESSION), service, REGION)
        expected = auth.signature(
            auth.string_to_sign(request, auth.canonical_request(request)), request
        )
        assert added["Authorization"].endswith(f"Signature={expected}") is matches
    assert f"/{REGION}/bedrock-mantle/aws4_request" in added["Authorization"]


@contextlib.asynccontextmanager
async def anthropic_upstream(stream: bytes) -> AsyncIterator[tuple[str, list[web.Request]]]:
    """bedrock-runtime's `/anthropic` stand-in: 403 on a signature botocore (service
    `bedrock`) does not recompute, else the Anthropic Messages stream `stream`."""
    seen: list[web.Request] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        problem = verify(request, await request.read())
        if problem is not None:
            return web.json_response({"message": problem}, status=403)
        return web.Response(body=stream, content_type="text/event-stream")

    async with serve_app(answer) as url:
        yield url, seen


async def _messages_through(stream: bytes) -> tuple[int, bytes, list[web.Request]]:
    body = {**request_for("anthropic"), "stream": True}
    async with (
        anthropic_upstream(stream) as (upstream, seen),
        serving(_settings(upstream)) as running,
        aiohttp.ClientSession() as session,
        session.post(
            f"{running.url}/anthropic/v1/messages?beta=true",
            json=body,
            headers={"x-lockgate-token": TOKEN, "anthropic-version": "2023-06-01"},
        ) as response,
    ):
        return response.status, await response.read(), seen


def _anthropic_stream(reply: Any) -> bytes:
    return b"".join(ANTHROPIC.frame(event) for event in ANTHROPIC.events(reply))


@pytest.mark.usefixtures("aws_env")
async def test_bedrock_runtimes_anthropic_path_is_gated_as_messages_and_signed() -> None:
    assert ACCEPTED.reply is not None
    assert INVALID_SECOND.reply is not None
    status, data, seen = await _messages_through(_anthropic_stream(ACCEPTED.reply))
    assert status == 200
    assert len(tool_events(data)) >= 2  # both calls released
    [request] = seen
    assert request.raw_path == "/anthropic/v1/messages?beta=true"

    status, data, seen = await _messages_through(_anthropic_stream(INVALID_SECOND.reply))
    assert status == 200  # the stream began: refused in it
    assert b"event: error" in data
    assert tool_events(data) == []  # no call of the batch was sent
    assert b"lockgate" in data.rsplit(b"event: error", 1)[1]  # the refusal is the last event
    assert len(seen) == 1  # signed right: the upstream answered (else a 403, no stream)


# --- AWS's own host names, resolved to loopback -------------------------------------------------


@pytest.fixture
def aws_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS's host names resolve to 127.0.0.1 in this test (nothing leaves loopback), so a
    route's upstream may name them: the host decides the control plane's host and the
    service signed for."""
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith((".amazonaws.com", ".api.aws")):
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)


@contextlib.asynccontextmanager
async def aws_upstream(service: str) -> AsyncIterator[tuple[int, list[web.Request]]]:
    """A loopback stand-in for AWS: 403 on a signature botocore does not recompute for
    `service`, else the inference-profile list or (a model request) an Anthropic stream."""
    assert ACCEPTED.reply is not None
    stream = _anthropic_stream(ACCEPTED.reply)
    seen: list[web.Request] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        problem = verify(request, await request.read(), service)
        if problem is not None:
            return web.json_response({"message": problem}, status=403)
        if request.method == "GET":
            return web.json_response({"inferenceProfileSummaries": []})
        return web.Response(body=stream, content_type="text/event-stream")

    async with serve_app(answer) as url:
        yield int(url.rsplit(":", 1)[1]), seen


@pytest.mark.usefixtures("aws_env", "aws_hosts")
async def test_a_look_up_leaves_bedrock_runtime_for_the_control_planes_host() -> None:
    async with aws_upstream("bedrock") as (port, seen):
        runtime = f"http://bedrock-runtime.{REGION}.amazonaws.com:{port}"
        async with serving(_settings(runtime)) as running:
            bedrock = _control_client(running.url)
            await asyncio.to_thread(bedrock.list_inference_profiles, typeEquals="SYSTEM_DEFINED")
    [request] = seen
    assert request.headers["host"] == f"bedrock.{REGION}.amazonaws.com:{port}"  # signed so


@pytest.mark.usefixtures("aws_env", "aws_hosts")
async def test_claude_codes_mantle_request_is_gated_and_signed_for_bedrock_mantle() -> None:
    """Claude Code's Mantle mode (`CLAUDE_CODE_USE_MANTLE`) sends `POST
    /anthropic/v1/messages?beta=true`: gated as Anthropic Messages, signed for
    `bedrock-mantle` (a signature for `bedrock` would be a 403 here)."""
    body = {**request_for("anthropic"), "stream": True}
    async with aws_upstream("bedrock-mantle") as (port, seen):
        mantle = f"http://bedrock-mantle.{REGION}.api.aws:{port}"
        async with (
            serving(_settings(mantle)) as running,
            aiohttp.ClientSession() as session,
            session.post(
                f"{running.url}/anthropic/v1/messages?beta=true",
                json=body,
                headers={"x-lockgate-token": TOKEN, "anthropic-version": "2023-06-01"},
            ) as response,
        ):
            data = await response.read()
    assert response.status == 200
    assert len(tool_events(data)) >= 2  # both calls released: signed right, and gated
    [request] = seen
    assert request.headers["host"] == f"bedrock-mantle.{REGION}.api.aws:{port}"
    assert f"/{REGION}/bedrock-mantle/aws4_request" in request.headers["authorization"]
