"""Signing upstream requests with AWS SigV4 (a route's `aws: {region, profile}`): botocore's
`SigV4Auth` for the service the upstream's host names (`service_for`: `bedrock` for
bedrock-runtime, the control plane and any other host; `bedrock-mantle` for Bedrock's
Mantle endpoint; `aws-external-anthropic` for Claude Platform on AWS), credentials from
botocore's standard chain (environment, a profile of the shared files, SSO, container or
instance roles), a session token included.
botocore is optional (`pip install 'lockgate[aws]'`): `aws_problem` says so when missing.

- **What is signed** is exactly what is sent: the method, the path as sent (each segment
  percent-encoded once as AWS SDKs send it, `aws_path`: a model id's `:` as `%3A`, an
  inference-profile ARN's `/` as `%2F`; SigV4's canonical URI encodes it again, `%253A`,
  as AWS computes it), the host, every header the proxy sends, and the body.
- **Credentials** are read per request (`get_frozen_credentials`): botocore refreshes
  refreshable ones before they expire (which may block on I/O), so signing runs off the
  event loop (`sign` is called in a thread).
- **The client's own AWS headers** (`AWS_CLIENT_HEADERS`: its signature, its dates, its
  session token) never go upstream.
- Never logged: no secret key or session token is in any repr or message (botocore's
  `add_auth` logs the canonical request, the session token in it, at debug: its steps are
  taken here without it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from multidict import CIMultiDict

__all__ = [
    "AWS_CLIENT_HEADERS",
    "AWS_EXTRA",
    "AwsSigner",
    "aws_path",
    "aws_problem",
    "fold_repeated",
    "service_for",
]

SERVICE = "bedrock"  # bedrock-runtime's and the control plane's signing name
# Hosts of another signing name: a label of the host says it (`bedrock-mantle.us-east-1.api.aws`,
# a VPC endpoint's `vpce-….bedrock-mantle.us-east-1.vpce.amazonaws.com`).
_SERVICES_BY_LABEL = {
    "bedrock-mantle": "bedrock-mantle",
    "aws-external-anthropic": "aws-external-anthropic",
}
AWS_EXTRA = "pip install 'lockgate[aws]'"
# The client's own signature and its parts: replaced by the proxy's.
AWS_CLIENT_HEADERS = frozenset(
    {"authorization", "date", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"}
)


def aws_problem() -> str | None:
    """Why SigV4 signing cannot be used here (botocore missing), or None."""
    try:
        import botocore.auth  # type: ignore[import-untyped]
        import botocore.session  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return f"SigV4 signing needs botocore: {AWS_EXTRA}"
    return None


def service_for(url: str) -> str:
    """The SigV4 service name a request to `url` is signed for: the one its host names
    (`_SERVICES_BY_LABEL`), else `bedrock` (bedrock-runtime, the control plane, a loopback
    or private endpoint)."""
    host = (urlsplit(url).hostname or "").lower()
    for label in host.split("."):
        if label in _SERVICES_BY_LABEL:
            return _SERVICES_BY_LABEL[label]
    return SERVICE


def aws_path(path: str) -> str:
    """`path` as AWS SDKs send it: each segment's characters other than unreserved ones
    percent-encoded once (an escape already there, `%2F`, kept as it is)."""
    return "/".join(quote(segment, safe="%") for segment in path.split("/"))


@dataclass(frozen=True, slots=True)
class AwsSigner:
    """SigV4 for one upstream: its region, and botocore's credentials (refreshed by
    botocore; never shown)."""

    region: str
    profile: str | None = None
    credentials: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_chain(cls, region: str, profile: str | None) -> AwsSigner:
        """The signer with credentials from botocore's standard chain (`profile`: that
        profile of the shared files). ConfigError (no secret in it) when none is found."""
        import botocore.exceptions  # type: ignore[import-untyped]
        import botocore.session

        from .settings import ConfigError

        where = f"profile {profile}" if profile else "the standard chain"
        try:
            credentials = botocore.session.Session(profile=profile).get_credentials()
        except botocore.exceptions.BotoCoreError as exc:  # a profile that is not there
            raise ConfigError(f"AWS credentials ({where}): {type(exc).__name__}") from None
        if credentials is None:
            raise ConfigError(f"no AWS credentials found ({where})")
        return cls(region, profile, credentials)

    def secrets(self) -> list[str]:
        """The secret key and the session token botocore holds now (for redaction; a
        refreshed token is not among them)."""
        frozen = self.credentials.get_frozen_credentials()
        return [str(value) for value in (frozen.secret_key, frozen.token) if value]

    def sign(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> dict[str, str]:
        """The headers to add to a request sent as given (`url` with its path as sent; the
        service its host names, `service_for`):
        `Authorization`, `X-Amz-Date`, and `X-Amz-Security-Token` with a session token.
        Blocking (a refresh may fetch credentials): call it off the event loop."""
        from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
        from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]

        credentials = self.credentials.get_frozen_credentials()
        auth = SigV4Auth(credentials, service_for(url), self.region)
        request = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
        # `SigV4Auth.add_auth`'s steps without its debug log, which writes the canonical
        # request and with it the session token.
        timestamp = datetime.now(UTC).strftime(SIGV4_TIMESTAMP)
        request.context["timestamp"] = timestamp
        added = {"X-Amz-Date": timestamp}
        if credentials.token:
            added["X-Amz-Security-Token"] = credentials.token
        for name, value in added.items():
            request.headers[name] = value
        canonical = auth.canonical_request(request)
        signature = auth.signature(auth.string_to_sign(request, canonical), request)
        signed = auth.signed_headers(auth.headers_to_sign(request))
        added["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={auth.scope(request)}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        return added


def fold_repeated(headers: CIMultiDict[str]) -> None:
    """Each header sent more than once becomes one, its values joined with `, ` (RFC 9110
    §5.3), so that the value signed is the value sent: the signer reads one value a name."""
    for name in {key.lower() for key in headers}:
        values = headers.getall(name)
        if len(values) > 1:
            headers[name] = ", ".join(values)
