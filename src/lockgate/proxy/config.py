"""`lockgate proxy --config FILE`: one proxy process for several providers.

The file is YAML (a mapping; no anchors or aliases, no tags beyond YAML's own; at most 1 MiB
and 32 levels of nesting). Every key is known, every value checked; an error is one line
naming the file, the line and the key: `proxy.yaml:12: routes[1].key.header: must be one of
authorization, x-api-key, api-key, x-goog-api-key`. `load_settings` reads it;
`settings_from_flags` makes the same settings from the one-route flags (`--upstream URL` and
the rest: the shorthand); `describe` says what a config means, one line per fact, without a
secret (`--check`).

```yaml
listen: {host: 127.0.0.1, port: 8787}
client_token: {env: LOCKGATE_CLIENT_TOKEN}   # or {file: /run/secrets/token}
routes:
  - name: anthropic                # the route's name: in logs and metrics
    prefix: /anthropic             # stripped before forwarding ("" or absent: every path)
    upstream: https://api.anthropic.com
    key: {env: ANTHROPIC_API_KEY}  # the proxy holds the key; {file: PATH} reads a file
    retries: {attempts: 2, max_wait: 20}
    fallbacks:
      - {upstream: https://backup.example, key: {env: BACKUP_KEY}, model: claude-x}
```

A route's upstream (or a fall-back) may say `aws: {region: us-east-1, profile: NAME}`
instead of a `key`: its requests are signed with AWS SigV4 (Bedrock; `proxy.sigv4`,
botocore's credential chain, `pip install 'lockgate[aws]'`).

Routes match by the longest prefix, on a segment boundary (`/anthropic` matches
`/anthropic/v1/messages`, not `/anthropicx`); a request no route matches is answered 404.

This module re-exports: the settings are in `settings.py`, the file's reader in
`config_file.py`, `--check`'s lines in `description.py`.
"""

from __future__ import annotations

from .config_file import MAX_CONFIG_BYTES as MAX_CONFIG_BYTES
from .config_file import MAX_CONFIG_DEPTH as MAX_CONFIG_DEPTH
from .config_file import load_settings, settings_from_text
from .description import describe, key_warnings
from .settings import (
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_MAX_HELD_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_STREAMS,
    KEY_HEADERS,
    ConfigError,
    KeyHeader,
    ProxyConfig,
    ProxySettings,
    RouteRetries,
    RouteSettings,
    SecretSource,
    UpstreamSettings,
    listen_problem,
    resolve_secrets,
    upstream_problem,
)
from .settings import (
    MAX_SECRET_FILE_BYTES as MAX_SECRET_FILE_BYTES,
)

__all__ = [
    "DEFAULT_HEAD_TIMEOUT",
    "DEFAULT_MAX_HELD_BYTES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_STREAMS",
    "KEY_HEADERS",
    "ConfigError",
    "KeyHeader",
    "ProxyConfig",
    "ProxySettings",
    "RouteRetries",
    "RouteSettings",
    "SecretSource",
    "UpstreamSettings",
    "describe",
    "key_warnings",
    "listen_problem",
    "load_settings",
    "resolve_secrets",
    "settings_from_text",
    "upstream_problem",
]
