"""The proxy configured from the environment, for gunicorn's aiohttp worker (`app_factory`):
a config file (`LOCKGATE_CONFIG=/etc/lockgate/proxy.yaml`, every route and setting in it,
`settings_from_environment`), or one route from `LOCKGATE_UPSTREAM` and the rest, as
`config_from_environment` lists them. The key and the
client token come from files (`LOCKGATE_API_KEY_FILE`, `LOCKGATE_CLIENT_TOKEN_FILE`: only a
regular file, one line, is read) or from variables whose names are given
(`LOCKGATE_API_KEY_ENV`, `LOCKGATE_CLIENT_TOKEN_ENV`). A variable's value stays in the
environment block every process was started with (what /proc/PID/environ shows), even after
the proxy unsets it: prefer the files.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from ..credentials import api_key_problem
from ..gate import GateLimits
from .access import host_name_problem
from .config import (
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_MAX_HELD_BYTES,
    DEFAULT_MAX_STREAMS,
    MAX_SECRET_FILE_BYTES,
    ConfigError,
    ProxyConfig,
    ProxySettings,
    load_settings,
    resolve_secrets,
)
from .engine import HOLDS, GatingOptions
from .settings import WEBSOCKET_MODES

__all__ = [
    "config_from_environment",
    "environment_config",
    "limit_variable",
    "settings_from_environment",
    "startup_settings",
]


def _float_variable(
    env: Mapping[str, str], name: str, default: float, *, positive: bool = False
) -> float:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        rule = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be a {rule} number of seconds")
    return value


def _whole_variable(env: Mapping[str, str], name: str, default: int) -> int:
    text = (env.get(name) or "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name} must be a whole number from 1")
    return int(text)


def _flag_variable(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    text = (env.get(name) or "").strip().lower()
    if not text:
        return default
    if text in ("0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise ValueError(f"{name} must be 1 or 0")


def limit_variable(field_name: str) -> str:
    """The environment variable of a `GateLimits` bound (`max_calls`: `LOCKGATE_MAX_CALLS`);
    the command line's flag is `--max-calls`."""
    return "LOCKGATE_" + field_name.upper()


def _read_secret_file(variable: str, path_text: str) -> str:
    """The secret in the file `path_text` names (systemd credentials, docker secrets): one
    line, its line break dropped. Only a regular file is read (a FIFO would wait: it is
    opened without waiting, and refused)."""
    try:
        descriptor = os.open(path_text, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(f"{variable} names {path_text}, which cannot be read ({reason})") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ValueError(f"{variable} names {path_text}, which is not a regular file")
        data = b""
        while len(data) <= MAX_SECRET_FILE_BYTES:
            piece = os.read(descriptor, MAX_SECRET_FILE_BYTES + 1 - len(data))
            if not piece:
                break
            data += piece
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(f"{variable} names {path_text}, which cannot be read ({reason})") from None
    finally:
        os.close(descriptor)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise ValueError(f"{variable}: {path_text} is larger than {MAX_SECRET_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ValueError(f"{variable}: {path_text} is not UTF-8 text") from None
    if not text:
        raise ValueError(f"{variable}: {path_text} holds no key")
    problem = api_key_problem(text)
    if problem is not None:
        raise ValueError(f"{variable}: {problem}")
    return text


def _secret(env: Mapping[str, str], base: str) -> tuple[str | None, str | None]:
    """The secret `LOCKGATE_{base}_FILE` or `LOCKGATE_{base}_ENV` gives (one of them), and
    the variable that held it (None for a file)."""
    by_name = env.get(f"LOCKGATE_{base}_ENV")
    by_file = env.get(f"LOCKGATE_{base}_FILE")
    if by_name and by_file:
        raise ValueError(f"give LOCKGATE_{base}_ENV or LOCKGATE_{base}_FILE, not both")
    if by_file:
        return _read_secret_file(f"LOCKGATE_{base}_FILE", by_file), None
    if not by_name:
        return None, None
    value = env.get(by_name)
    if not value:
        raise ValueError(f"LOCKGATE_{base}_ENV names {by_name}, which is not set")
    problem = api_key_problem(value)
    if problem is not None:
        raise ValueError(f"{by_name}: {problem}")
    return value, by_name


def environment_config(env: Mapping[str, str]) -> tuple[ProxyConfig, list[str]]:
    """The config, and the variables that held its secrets (to wipe)."""
    from ..client import DEFAULT_DEADLINE_SECONDS, DEFAULT_IDLE_TIMEOUT_SECONDS
    from .engine import DEFAULT_KEEPALIVE_SECONDS

    upstream = env.get("LOCKGATE_UPSTREAM")
    if not upstream:
        raise ValueError("LOCKGATE_UPSTREAM is not set")
    given = env.get("LOCKGATE_HOLD") or "tools"
    if given not in HOLDS:
        raise ValueError(f"LOCKGATE_HOLD must be {' or '.join(HOLDS)}")
    defaults = GateLimits()
    limits = GateLimits(
        **{
            bound.name: _whole_variable(
                env, limit_variable(bound.name), getattr(defaults, bound.name)
            )
            for bound in dataclasses.fields(GateLimits)
        }
    )
    gating = GatingOptions(
        limits=limits,
        idle_timeout=_float_variable(
            env, "LOCKGATE_IDLE_TIMEOUT", DEFAULT_IDLE_TIMEOUT_SECONDS, positive=True
        ),
        deadline=_float_variable(env, "LOCKGATE_DEADLINE", DEFAULT_DEADLINE_SECONDS, positive=True),
        keepalive_interval=_float_variable(
            env, "LOCKGATE_KEEPALIVE", DEFAULT_KEEPALIVE_SECONDS, positive=True
        ),
        validate_schemas=_flag_variable(env, "LOCKGATE_VALIDATE_SCHEMAS", default=True),
        hold=HOLDS[HOLDS.index(given)],
        first_byte_timeout=(
            _float_variable(env, "LOCKGATE_FIRST_BYTE_TIMEOUT", 0.0, positive=True)
            if env.get("LOCKGATE_FIRST_BYTE_TIMEOUT")
            else None
        ),
    )
    websocket = env.get("LOCKGATE_WEBSOCKET") or "relay"
    if websocket not in WEBSOCKET_MODES:
        raise ValueError(f"LOCKGATE_WEBSOCKET must be {' or '.join(WEBSOCKET_MODES)}")
    hosts = tuple(
        name for name in re.split(r"[\s,]+", env.get("LOCKGATE_ALLOW_HOSTS") or "") if name
    )
    for name in hosts:
        if (problem := host_name_problem(name)) is not None:
            raise ValueError(f"LOCKGATE_ALLOW_HOSTS: {problem}")
    api_key, key_variable = _secret(env, "API_KEY")
    client_token, token_variable = _secret(env, "CLIENT_TOKEN")
    if api_key is not None and client_token is None:
        # The listen address is gunicorn's, not visible here: a held key always needs a
        # client token, or the proxy may be an open relay with the key.
        raise ValueError(
            "a proxy that holds a key (LOCKGATE_API_KEY_FILE or LOCKGATE_API_KEY_ENV) needs "
            "LOCKGATE_CLIENT_TOKEN_FILE or LOCKGATE_CLIENT_TOKEN_ENV"
        )
    config = ProxyConfig(
        upstream,
        gating=gating,
        api_key=api_key,
        client_token=client_token,
        max_streams=_whole_variable(env, "LOCKGATE_MAX_STREAMS", DEFAULT_MAX_STREAMS),
        grace_seconds=_float_variable(env, "LOCKGATE_GRACE", 10.0),
        allow_hosts=hosts,
        key_on_any_path=_flag_variable(env, "LOCKGATE_KEY_ON_ANY_PATH"),
        head_timeout=_float_variable(
            env, "LOCKGATE_HEAD_TIMEOUT", DEFAULT_HEAD_TIMEOUT, positive=True
        ),
        max_held_bytes=_whole_variable(env, "LOCKGATE_MAX_HELD_BYTES", DEFAULT_MAX_HELD_BYTES),
        websocket=WEBSOCKET_MODES[WEBSOCKET_MODES.index(websocket)],
    )
    return config, [name for name in (key_variable, token_variable) if name]


def config_from_environment(environ: Mapping[str, str] | None = None) -> ProxyConfig:
    """A `ProxyConfig` from the environment; ValueError (one line, never quoting a secret)
    when a setting is unusable.

    `LOCKGATE_UPSTREAM` (required); the key and the client token from a file
    (`LOCKGATE_API_KEY_FILE`, `LOCKGATE_CLIENT_TOKEN_FILE`: a path, e.g. under
    `$CREDENTIALS_DIRECTORY` or `/run/secrets`) or from a variable whose name is given
    (`LOCKGATE_API_KEY_ENV`, `LOCKGATE_CLIENT_TOKEN_ENV`); `LOCKGATE_HOLD`,
    `LOCKGATE_IDLE_TIMEOUT`, `LOCKGATE_DEADLINE`, `LOCKGATE_KEEPALIVE`,
    `LOCKGATE_VALIDATE_SCHEMAS` (`0` turns it off), `LOCKGATE_MAX_STREAMS`, `LOCKGATE_GRACE`,
    `LOCKGATE_HEAD_TIMEOUT`, `LOCKGATE_ALLOW_HOSTS` (names, comma- or space-separated),
    `LOCKGATE_KEY_ON_ANY_PATH` (`1`), `LOCKGATE_WEBSOCKET` (`relay`, the default: a
    Responses WebSocket is relayed, each response gated; `refuse`: answered 426), and one
    variable per gate bound
    (`LOCKGATE_MAX_CALLS`, `LOCKGATE_MAX_ARGUMENT_CHARS`, `LOCKGATE_MAX_TEXT_CHARS`,
    `LOCKGATE_MAX_REASONING_CHARS`, `LOCKGATE_MAX_NATIVE_ITEMS`,
    `LOCKGATE_MAX_NATIVE_BYTES`)."""
    return environment_config(os.environ if environ is None else environ)[0]


def settings_from_environment(env: Mapping[str, str]) -> tuple[ProxySettings, list[str]]:
    """The settings (every secret read) and the variables that held secrets (to wipe):
    from the file `LOCKGATE_CONFIG` names, or from `LOCKGATE_UPSTREAM` and the rest.
    ValueError: one line, never quoting a secret. The file's `listen` is not used (gunicorn
    binds); a file whose routes hold a key needs its `client_token`, as the listen address
    is not known here."""
    path = env.get("LOCKGATE_CONFIG")
    if not path:
        config, variables = environment_config(env)
        return config.settings(), variables
    if env.get("LOCKGATE_UPSTREAM"):
        raise ValueError("LOCKGATE_CONFIG and LOCKGATE_UPSTREAM: give one (the file's routes)")
    try:
        settings, _, variables = resolve_secrets(load_settings(Path(path)), env)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    if settings.holds_keys and settings.client_token is None:
        raise ValueError(f"{path}: a route holds a key: the file needs a client_token")
    return settings, variables


def startup_settings(env: Mapping[str, str]) -> tuple[ProxySettings, list[str]]:
    """What a process serving the proxy checks before it starts (gunicorn's master in
    `gunicorn_config.on_starting`, each worker in `server.app_factory`): the settings
    (`settings_from_environment`) and, when the metrics are on and
    `PROMETHEUS_MULTIPROC_DIR` is set, that its folder can hold every worker's series.
    ValueError: one line."""
    from .metrics import MULTIPROCESS_VARIABLE, multiprocess_folder_problem

    settings, variables = settings_from_environment(env)
    folder = env.get(MULTIPROCESS_VARIABLE)
    if settings.metrics and folder:
        problem = multiprocess_folder_problem(folder)
        if problem is not None:
            raise ValueError(problem)
    return settings, variables
