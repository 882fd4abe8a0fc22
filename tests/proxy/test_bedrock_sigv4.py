"""A Bedrock route that signs upstream requests with AWS SigV4 (`aws: {region}`,
`proxy/sigv4.py`), read by boto3's real client: a loopback upstream recomputes each
request's signature with botocore from the same credentials and answers 403 on a mismatch,
else a ConverseStream answer. No network, no real AWS config (the shared files are empty)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import multidict
import pytest
from aiohttp import web
from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials  # type: ignore[import-untyped]
from botocore.exceptions import ClientError  # type: ignore[import-untyped]

from lockgate.eventstream import MEDIA_TYPE
from lockgate.providers.bedrock.server_render import RENDERER
from lockgate.proxy.config_file import settings_from_text
from lockgate.proxy.routes import PathProblem, plain_path
from lockgate.proxy.server import ProxyRecord, serving
from lockgate.proxy.settings import (
    AwsSigning,
    ConfigError,
    ProxySettings,
    RouteSettings,
    SecretSource,
    UpstreamSettings,
)
from lockgate.proxy.sigv4 import AwsSigner, aws_path

from .test_bedrock_proxy import client, converse_kwargs, tool_uses
from .test_server import ACCEPTED, gating, serve_app

REGION = "us-east-1"
ACCESS = "AKIAEXAMPLESIGV4TEST"
SECRET = "sigv4-SECRET-key-do-not-log-0123456789abcdef"
SESSION = "sigv4-SESSION-token-do-not-log-fedcba9876543210"
TOKEN = "lockgate-client-TOKEN-sigv4-5c4b3a"
PLAIN = "anthropic.claude-3-5-sonnet-20240620-v1:0"
PROFILE_ARN = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-x"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Static credentials in the environment; empty shared files (no real config read)."""
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        empty = tmp_path / name.lower()
        empty.write_text("")
        monkeypatch.setenv(name, str(empty))
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION)


def verify(request: web.Request, body: bytes, service: str = "bedrock") -> str | None:
    """Why the request's SigV4 signature is not the one botocore computes from the test's
    credentials for `service` over what arrived (None: it is)."""
    authorization = request.headers.get("authorization", "")
    scheme, _, rest = authorization.partition(" ")
    if scheme != "AWS4-HMAC-SHA256":
        return f"not SigV4: {scheme!r}"
    parts = dict(part.strip().split("=", 1) for part in rest.split(","))
    signed = parts["SignedHeaders"].split(";")
    if "host" not in signed or "x-amz-date" not in signed:
        return "host and x-amz-date must be signed"
    if request.headers.get("x-amz-security-token") != SESSION:
        return "no session token"
    if "x-amz-security-token" not in signed:
        return "the session token is not signed"
    url = f"http://{request.headers['host']}{request.raw_path}"
    # a name sent more than once is signed as its values joined, as AWS reads it
    headers = {name: ",".join(request.headers.getall(name)) for name in signed}
    recomputed = AWSRequest(method=request.method, url=url, headers=headers, data=body)
    recomputed.context["timestamp"] = request.headers["x-amz-date"]
    signer = SigV4Auth(Credentials(ACCESS, SECRET, SESSION), service, REGION)
    canonical = signer.canonical_request(recomputed)
    expected = signer.signature(signer.string_to_sign(recomputed, canonical), recomputed)
    if parts["Signature"] != expected:
        return "the signature does not match"
    if (
        not parts["Credential"].startswith(f"{ACCESS}/")
        or f"/{REGION}/{service}/" not in parts["Credential"]
    ):
        return "the credential scope is not this key's, region's and service's"
    return None


@contextlib.asynccontextmanager
async def verifying_upstream() -> AsyncIterator[tuple[str, list[web.Request]]]:
    """An upstream that answers a request signed right with a ConverseStream (the lab's
    tool-call answer), anything else with 403 (the reason in Bedrock's error body)."""
    assert ACCEPTED.reply is not None
    stream = b"".join(RENDERER.frame(event) for event in RENDERER.events(ACCEPTED.reply))
    seen: list[web.Request] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        problem = verify(request, await request.read())
        if problem is not None:
            return web.json_response(
                {"message": problem, "__type": "InvalidSignatureException"}, status=403
            )
        return web.Response(body=stream, content_type=MEDIA_TYPE)

    async with serve_app(answer) as url:
        yield url, seen


def settings(upstream: str) -> ProxySettings:
    route = RouteSettings(
        "bedrock", "", UpstreamSettings(upstream, aws=AwsSigning(REGION)), gating()
    )
    return ProxySettings((route,), client_token=SecretSource(value=TOKEN))


def read_through(url: str, model: str, into: list[dict[str, Any]]) -> None:
    """boto3's ConverseStream through the proxy, the client token in `x-lockgate-token`
    (boto3 signs with its own dummy credentials, which the proxy drops)."""
    bedrock = client(url)

    def add(request: Any, **_: Any) -> None:
        request.headers["x-lockgate-token"] = TOKEN

    bedrock.meta.events.register("before-sign.bedrock-runtime.*", add)
    answer = bedrock.converse_stream(modelId=model, **converse_kwargs())
    for event in answer["stream"]:
        into.append(event)


def assert_no_secret(records: list[ProxyRecord], caplog: pytest.LogCaptureFixture) -> None:
    """Neither the secret key nor the session token in the proxy's records or in any log
    record (botocore's too: only the proxy holds them); the client token in none of the
    proxy's (boto3's own client logs it, in its canonical request, at debug)."""
    logged = [(record.name, record.getMessage()) for record in caplog.records]
    assert any(name.startswith("botocore") for name, _ in logged)  # debug logs were taken
    for secret in (SECRET, SESSION, TOKEN):
        assert secret not in repr(records)
        leaked = [
            name
            for name, message in logged
            if secret in message and (secret != TOKEN or name.startswith(("lockgate", "aiohttp")))
        ]
        assert not leaked, leaked


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("model", [PLAIN, PROFILE_ARN], ids=["model-id", "profile-arn"])
async def test_boto3_reads_through_a_proxy_that_signs_with_sigv4(
    model: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    events: list[dict[str, Any]] = []
    records: list[ProxyRecord] = []
    async with (
        verifying_upstream() as (upstream, seen),
        serving(settings(upstream), records.append) as running,
    ):
        await asyncio.to_thread(read_through, running.url, model, events)
    assert tool_uses(events) == ["read", "edit"]
    [request] = seen
    assert request.raw_path == f"/model/{quote(model, safe='')}/converse-stream"  # as boto3
    assert "%3A" in request.raw_path  # the `:` encoded once in the path, twice in the signature
    assert "x-lockgate-token" not in request.headers
    assert "Credential=x/" not in request.headers["authorization"]  # not boto3's own
    assert records[0].outcome == "passed"
    assert_no_secret(records, caplog)


@pytest.mark.usefixtures("aws_env")
async def test_a_proxy_signing_with_another_secret_gets_403_passed_back_to_boto3(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET + "-wrong")
    records: list[ProxyRecord] = []
    async with (
        verifying_upstream() as (upstream, seen),
        serving(settings(upstream), records.append) as running,
    ):
        with pytest.raises(ClientError) as raised:
            await asyncio.to_thread(read_through, running.url, PLAIN, [])
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert "signature does not match" in raised.value.response["Error"]["Message"]
    assert len(seen) == 1
    assert_no_secret(records, caplog)


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("model", [PLAIN, PROFILE_ARN], ids=["model-id", "profile-arn"])
def test_the_signature_is_over_the_path_as_sent_double_encoded(model: str) -> None:
    """The signer given the once-encoded path (`%3A`, an ARN's `/` as `%2F`) signs its
    canonical URI encoded again, as AWS does: botocore's verifier (`verify`'s computation)
    agrees, and a signature over the plain path differs."""
    signer = AwsSigner.from_chain(REGION, None)
    path = f"/model/{quote(model, safe='')}/converse-stream"  # as boto3 sends it
    assert aws_path(path) == path
    if "/" in model:
        assert "inference-profile%2Fus.anthropic" in path
    url = "https://bedrock-runtime.us-east-1.amazonaws.com" + path
    headers = {"content-type": "application/json"}
    added = signer.sign("POST", url, headers, b"{}")
    assert added["X-Amz-Security-Token"] == SESSION
    sent = {**headers, **{name: added[name] for name in ("X-Amz-Date", "X-Amz-Security-Token")}}
    request = AWSRequest(method="POST", url=url, headers=sent, data=b"{}")
    request.context["timestamp"] = added["X-Amz-Date"]
    check = SigV4Auth(Credentials(ACCESS, SECRET, SESSION), "bedrock", REGION)
    canonical = check.canonical_request(request)
    assert canonical.splitlines()[1] == path.replace("%", "%25")  # encoded twice
    signature = check.signature(check.string_to_sign(request, canonical), request)
    assert added["Authorization"].endswith(f"Signature={signature}")
    assert SECRET not in repr(signer)
    assert SESSION not in repr(signer)


def test_a_config_file_route_may_sign_with_aws() -> None:
    text = (
        "routes:\n"
        "  - name: bedrock\n"
        "    upstream: https://bedrock-runtime.us-east-1.amazonaws.com\n"
        "    aws: {region: us-east-1, profile: work}\n"
    )
    parsed = settings_from_text(text, "lockgate.yaml")
    assert parsed.routes[0].upstream.aws == AwsSigning("us-east-1", "work")
    assert parsed.holds_keys
    with pytest.raises(Exception, match="give key or aws, not both"):
        settings_from_text(text + "    key: {env: BEDROCK_KEY}\n", "lockgate.yaml")
    with pytest.raises(Exception, match="region is required"):
        settings_from_text(text.replace("region: us-east-1, ", ""), "lockgate.yaml")
    with pytest.raises(Exception, match="not an AWS region"):
        settings_from_text(text.replace("us-east-1,", "nowhere,"), "lockgate.yaml")


def test_without_botocore_an_aws_route_fails_the_check_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "botocore.auth", None)  # an import of it fails
    text = (
        "routes:\n"
        "  - name: bedrock\n"
        "    upstream: https://bedrock-runtime.us-east-1.amazonaws.com\n"
        "    aws: {region: us-east-1}\n"
    )
    with pytest.raises(Exception, match=r"pip install 'lockgate\[aws\]'") as raised:
        settings_from_text(text, "lockgate.yaml")
    assert "\n" not in str(raised.value)


def test_an_encoded_slash_passes_only_inside_a_bedrock_model_id() -> None:
    arn = quote(PROFILE_ARN, safe="")
    assert plain_path(f"/model/{arn}/converse-stream").endswith(
        "profile%2Fus.anthropic.claude-x/converse-stream"
    )
    assert plain_path(f"/bedrock/model/{arn}/converse").startswith("/bedrock/model/arn:aws:")
    assert plain_path(f"/model/{arn}/invoke").endswith("profile%2Fus.anthropic.claude-x/invoke")
    for refused in (
        f"/v1%2Fx/model/{arn}/converse-stream",  # outside the model id
        "/model/a%2F..%2Fb/converse",  # a walkable id
        "/model/%2Fa/converse-stream",  # an empty part
        f"/model/{arn}/count-tokens",  # not a gated model path
        "/v1/chat%2Fcompletions",
        "/v1/files%2Fx",
    ):
        with pytest.raises(PathProblem, match="an encoded '/'"):
            plain_path(refused)


@pytest.mark.usefixtures("aws_env")
async def test_a_session_token_the_upstream_echoes_reaches_boto3_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)

    async def echo(request: web.Request) -> web.StreamResponse:
        token = request.headers.get("x-amz-security-token", "")
        message = f"token {token} is expired"
        return web.json_response(
            {"message": message, "__type": "ExpiredTokenException"}, status=403
        )

    records: list[ProxyRecord] = []
    async with serve_app(echo) as upstream, serving(settings(upstream), records.append) as running:
        with pytest.raises(ClientError) as raised:
            await asyncio.to_thread(read_through, running.url, PLAIN, [])
    message = raised.value.response["Error"]["Message"]
    assert message == "token [redacted] is expired"
    assert_no_secret(records, caplog)


@pytest.mark.usefixtures("aws_env")
def test_no_credentials_in_the_chain_is_a_config_error_naming_no_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    with pytest.raises(ConfigError, match="no AWS credentials found"):
        AwsSigner.from_chain(REGION, None)
    with pytest.raises(ConfigError, match=r"profile nowhere.*ProfileNotFound"):
        AwsSigner.from_chain(REGION, "nowhere")


@pytest.mark.usefixtures("aws_env")
async def test_a_header_the_client_repeats_is_sent_as_one_the_value_signed() -> None:
    """A name the client sends twice reaches AWS as one header, the value that was signed
    (the verifier joins repeated values as AWS does: two values sent, one signed, is a 403)."""
    async with (
        verifying_upstream() as (upstream, seen),
        serving(settings(upstream)) as running,
        aiohttp.ClientSession() as session,
    ):
        body = {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
        headers = [("x-lockgate-token", TOKEN), ("x-extra", "one"), ("X-Extra", "two")]
        async with session.post(
            f"{running.url}/model/{quote(PLAIN, safe='')}/converse-stream",
            json=body,
            headers=multidict.CIMultiDict(headers),
        ) as response:
            await response.read()
    [request] = seen
    assert len(request.headers.getall("x-extra")) == 1
    assert response.status == 200  # a signature that did not match would be a 403


@pytest.mark.usefixtures("aws_env")
async def test_a_signing_failure_says_its_kind_never_its_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A credential process's error may carry its output: the answer and the record name
    only the exception's type."""

    def fails(*_: Any, **__: Any) -> dict[str, str]:
        raise RuntimeError("credential_process said: SECRET-OUTPUT-of-the-process")

    monkeypatch.setattr(AwsSigner, "sign", fails)
    records: list[ProxyRecord] = []
    async with (
        verifying_upstream() as (upstream, seen),
        serving(settings(upstream), records.append) as running,
        aiohttp.ClientSession() as session,
        session.post(
            f"{running.url}/model/{quote(PLAIN, safe='')}/converse-stream",
            json={"messages": []},
            headers={"x-lockgate-token": TOKEN},
        ) as response,
    ):
        text = await response.text()
    assert response.status == 502
    assert "RuntimeError" in text
    assert "SECRET-OUTPUT" not in text
    assert "SECRET-OUTPUT" not in repr(records)
    assert not seen  # nothing unsigned went upstream
