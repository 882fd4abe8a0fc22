"""The agents under test: how each is installed, configured and started, headless, against a
base URL, with a placeholder key, a fresh HOME, and its update checks, telemetry and other
network extras turned off.

- `claude`: Anthropic Messages; `ANTHROPIC_BASE_URL` (the host root).
- `claude-vertex`: Anthropic on Vertex AI (`…/publishers/anthropic/models/{m}:streamRawPredict`);
  `CLAUDE_CODE_USE_VERTEX=1`, `ANTHROPIC_VERTEX_BASE_URL` (`…/v1`), a made-up project and
  region, `CLAUDE_CODE_SKIP_VERTEX_AUTH=1` (no Google credentials, no auth header at all).
- `claude-bedrock`: Anthropic on Bedrock (`…/model/{m}/invoke-with-response-stream`, the AWS
  event stream); `CLAUDE_CODE_USE_BEDROCK=1`, `ANTHROPIC_BEDROCK_BASE_URL` (the host root),
  `AWS_REGION`, `CLAUDE_CODE_SKIP_BEDROCK_AUTH=1` (no AWS credentials, no auth header). It
  also sends `GET /inference-profiles?type=SYSTEM_DEFINED` (the control plane) there.
- `claude-mantle`: Anthropic Messages on Bedrock's Mantle endpoint
  (`…/anthropic/v1/messages?beta=true`); `CLAUDE_CODE_USE_MANTLE=1`,
  `ANTHROPIC_BEDROCK_MANTLE_BASE_URL` (`…/anthropic`), `AWS_REGION`,
  `CLAUDE_CODE_SKIP_MANTLE_AUTH=1`.
- `codex`: Responses, the default model (its shell is the custom `exec` tool); a
  `[model_providers.hostile]` block with `base_url` (`…/v1`), `wire_api = "responses"` and
  `env_key`.
- `codex-gpt-5.5`: the same with `-m gpt-5.5` (classic function tools: `exec_command`).
- `codex-builtin`: the built-in `openai` provider, `openai_base_url` (`…/v1`) in config.toml
  and `CODEX_API_KEY`; it tries a WebSocket (`GET …/v1/responses`) before HTTP.
- `gemini`: Gemini native; `GOOGLE_GEMINI_BASE_URL` (the host root), `GEMINI_API_KEY`, `-m
  gemini-2.5-flash`.
- `ai-sdk-chat`, `ai-sdk-responses`, `ai-sdk-anthropic`: `ai_sdk_agent.mjs` with
  `createOpenAI({baseURL}).chat(…)` / `.responses(…)` / `createAnthropic({baseURL})` (`…/v1`).
- `ai-sdk-bedrock`, `ai-sdk-bedrock-anthropic`: `@ai-sdk/amazon-bedrock`'s
  `createAmazonBedrock({baseURL, region, apiKey})` (ConverseStream) and
  `createAmazonBedrockAnthropic(…)` (InvokeModelWithResponseStream), the host root as
  `baseURL`, the placeholder key as a Bedrock API key (a bearer token).

Claude Code refuses `--dangerously-skip-permissions` as root unless `IS_SANDBOX=1`; Gemini CLI
refuses an untrusted folder headless unless `GEMINI_CLI_TRUST_WORKSPACE=true`, and without
`-m` routes every prompt through a JSON classifier request first. `OPENAI_BASE_URL` is ignored
by Codex 0.171 (its traffic goes to OpenAI's hosts).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "AGENTS",
    "GROUPS",
    "PACKAGES",
    "PROMPT",
    "Agent",
    "Installation",
    "Invocation",
    "RunPaths",
]

# The versions the table was measured with (the npm registry's latest on 2026-12-03).
PACKAGES: dict[str, str] = {
    "@openai/codex": "0.171.0",
    "@anthropic-ai/claude-code": "2.1.332",
    "@google/gemini-cli": "0.61.0",
    "ai": "7.0.173",
    "@ai-sdk/openai": "4.0.118",
    "@ai-sdk/anthropic": "4.0.105",
    "@ai-sdk/amazon-bedrock": "5.0.101",  # the registry's latest on 2026-12-05
}

PROMPT = "Create the marker file with your shell tool, then say done."
AI_SDK_SCRIPT = "ai_sdk_agent.mjs"


@dataclass(frozen=True)
class Installation:
    """The npm folder the agents (or other pinned `packages`) are installed in."""

    root: Path
    packages: Mapping[str, str] = field(default_factory=lambda: PACKAGES)

    def bin(self, name: str) -> Path:
        return self.root / "node_modules" / ".bin" / name

    def installed_version(self, package: str) -> str | None:
        manifest = self.root / "node_modules" / package / "package.json"
        try:
            value = json.loads(manifest.read_text())
        except (OSError, ValueError):
            return None
        version = value.get("version") if isinstance(value, dict) else None
        return version if isinstance(version, str) else None

    def missing(self) -> list[str]:
        """The pinned packages not installed at their version."""
        return [
            f"{package}@{version}"
            for package, version in self.packages.items()
            if self.installed_version(package) != version
        ]

    def claude(self) -> list[str]:
        """Claude Code's command: the native binary its postinstall puts in place, else its
        wrapper (which finds the platform package's binary)."""
        binary = self.bin("claude")
        try:
            head = binary.read_bytes()[:4] if binary.exists() else b""
        except OSError:
            head = b""
        if head == b"\x7fELF" or head.startswith(b"#!"):
            return [str(binary)]
        wrapper = self.root / "node_modules" / "@anthropic-ai" / "claude-code" / "cli-wrapper.cjs"
        return [_node(), str(wrapper)]


@dataclass(frozen=True)
class RunPaths:
    """One run's own folders (all inside its temporary folder)."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def marker(self) -> Path:
        return self.work / "lockgate-marker"

    def make(self) -> None:
        for folder in (self.home, self.work, self.tmp):
            folder.mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class Invocation:
    argv: list[str]
    env: dict[str, str]
    cwd: Path


def _node() -> str:
    return shutil.which("node") or "node"


def _base_env(paths: RunPaths) -> dict[str, str]:
    node_dir = str(Path(_node()).resolve().parent)
    home = str(paths.home)
    return {
        "PATH": f"{node_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": str(paths.tmp),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "NPM_CONFIG_UPDATE_NOTIFIER": "false",
    }


Setup = Callable[[Installation, RunPaths, str, str], Invocation]


@dataclass(frozen=True)
class Agent:
    name: str
    group: str
    protocol: str  # what it speaks to the base URL
    shell_tool: str  # the tool the hostile server calls
    setup: Setup = field(repr=False)

    def invocation(
        self, installation: Installation, paths: RunPaths, base_url: str, key: str
    ) -> Invocation:
        return self.setup(installation, paths, base_url, key)


# --- Claude Code -----------------------------------------------------------------------------

_CLAUDE_QUIET: Mapping[str, str] = {
    "IS_SANDBOX": "1",  # --dangerously-skip-permissions is refused as root without it
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


def _claude_argv(installation: Installation) -> list[str]:
    return [
        *installation.claude(),
        "-p",
        PROMPT,
        "--dangerously-skip-permissions",
        "--max-turns",
        "4",
    ]


def _claude(installation: Installation, paths: RunPaths, base_url: str, key: str) -> Invocation:
    env = {**_base_env(paths), **_CLAUDE_QUIET}
    env["ANTHROPIC_BASE_URL"] = base_url
    env["ANTHROPIC_API_KEY"] = key
    return Invocation(_claude_argv(installation), env, paths.work)


def _claude_vertex(
    installation: Installation, paths: RunPaths, base_url: str, key: str
) -> Invocation:
    env = {**_base_env(paths), **_CLAUDE_QUIET}
    env["CLAUDE_CODE_USE_VERTEX"] = "1"
    env["CLAUDE_CODE_SKIP_VERTEX_AUTH"] = "1"  # no Google credentials: no auth header at all
    env["ANTHROPIC_VERTEX_BASE_URL"] = f"{base_url}/v1"
    env["ANTHROPIC_VERTEX_PROJECT_ID"] = "lockgate-interop"
    env["CLOUD_ML_REGION"] = "us-east5"
    return Invocation(_claude_argv(installation), env, paths.work)


def _claude_bedrock(
    installation: Installation, paths: RunPaths, base_url: str, key: str
) -> Invocation:
    env = {**_base_env(paths), **_CLAUDE_QUIET}
    env["CLAUDE_CODE_USE_BEDROCK"] = "1"
    env["CLAUDE_CODE_SKIP_BEDROCK_AUTH"] = "1"  # no AWS credentials: no auth header at all
    env["ANTHROPIC_BEDROCK_BASE_URL"] = base_url
    env["AWS_REGION"] = "us-east-1"
    return Invocation(_claude_argv(installation), env, paths.work)


def _claude_mantle(
    installation: Installation, paths: RunPaths, base_url: str, key: str
) -> Invocation:
    env = {**_base_env(paths), **_CLAUDE_QUIET}
    env["CLAUDE_CODE_USE_MANTLE"] = "1"
    env["CLAUDE_CODE_SKIP_MANTLE_AUTH"] = "1"
    env["ANTHROPIC_BEDROCK_MANTLE_BASE_URL"] = f"{base_url}/anthropic"
    env["AWS_REGION"] = "us-east-1"
    return Invocation(_claude_argv(installation), env, paths.work)


# --- Codex -----------------------------------------------------------------------------------

_CODEX_QUIET = """check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false
"""


def _codex_argv(installation: Installation, model: str | None) -> list[str]:
    argv = [
        str(installation.bin("codex")),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--color",
        "never",
    ]
    if model is not None:
        argv += ["-m", model]
    return [*argv, PROMPT]


def _codex_provider(model: str | None) -> Setup:
    def setup(installation: Installation, paths: RunPaths, base_url: str, key: str) -> Invocation:
        codex_home = paths.home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        config = (
            'model_provider = "hostile"\n'
            + _CODEX_QUIET
            + "\n[model_providers.hostile]\n"
            + 'name = "hostile"\n'
            + f"base_url = {json.dumps(base_url + '/v1')}\n"
            + 'wire_api = "responses"\n'
            + 'env_key = "HOSTILE_API_KEY"\n'
        )
        (codex_home / "config.toml").write_text(config)
        env = {**_base_env(paths), "CODEX_HOME": str(codex_home), "HOSTILE_API_KEY": key}
        return Invocation(_codex_argv(installation, model), env, paths.work)

    return setup


def _codex_builtin(
    installation: Installation, paths: RunPaths, base_url: str, key: str
) -> Invocation:
    codex_home = paths.home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    config = f"openai_base_url = {json.dumps(base_url + '/v1')}\n" + _CODEX_QUIET
    (codex_home / "config.toml").write_text(config)
    env = {**_base_env(paths), "CODEX_HOME": str(codex_home), "CODEX_API_KEY": key}
    return Invocation(_codex_argv(installation, None), env, paths.work)


# --- Gemini CLI ------------------------------------------------------------------------------

_GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    "telemetry": {"enabled": False},
}


def _gemini(installation: Installation, paths: RunPaths, base_url: str, key: str) -> Invocation:
    settings = paths.home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(_GEMINI_SETTINGS, indent=2))
    env = _base_env(paths)
    env["GEMINI_API_KEY"] = key
    env["GOOGLE_GEMINI_BASE_URL"] = base_url
    env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
    argv = [str(installation.bin("gemini")), "-m", "gemini-2.5-flash", "-p", PROMPT, "--yolo"]
    return Invocation(argv, env, paths.work)


# --- the AI SDK ------------------------------------------------------------------------------


def _ai_sdk(flavour: str) -> Setup:
    def setup(installation: Installation, paths: RunPaths, base_url: str, key: str) -> Invocation:
        env = {**_base_env(paths), "HOSTILE_API_KEY": key}
        script = installation.root / AI_SDK_SCRIPT
        base = base_url if flavour.startswith("bedrock") else f"{base_url}/v1"
        argv = [_node(), str(script), flavour, base, PROMPT]
        return Invocation(argv, env, paths.work)

    return setup


AGENTS: dict[str, Agent] = {
    agent.name: agent
    for agent in (
        Agent("claude", "claude", "anthropic", "Bash", _claude),
        Agent("claude-vertex", "claude", "anthropic (vertex)", "Bash", _claude_vertex),
        Agent("claude-bedrock", "claude", "bedrock", "Bash", _claude_bedrock),
        Agent("claude-mantle", "claude", "anthropic (mantle)", "Bash", _claude_mantle),
        Agent("codex", "codex", "responses", "exec (custom)", _codex_provider(None)),
        Agent("codex-gpt-5.5", "codex", "responses", "exec_command", _codex_provider("gpt-5.5")),
        Agent("codex-builtin", "codex", "responses", "exec (custom)", _codex_builtin),
        Agent("gemini", "gemini", "gemini", "run_shell_command", _gemini),
        Agent("ai-sdk-chat", "ai-sdk", "chat", "bash", _ai_sdk("chat")),
        Agent("ai-sdk-responses", "ai-sdk", "responses", "bash", _ai_sdk("responses")),
        Agent("ai-sdk-anthropic", "ai-sdk", "anthropic", "bash", _ai_sdk("anthropic")),
        Agent("ai-sdk-bedrock", "ai-sdk", "converse", "bash", _ai_sdk("bedrock")),
        Agent(
            "ai-sdk-bedrock-anthropic", "ai-sdk", "bedrock", "bash", _ai_sdk("bedrock-anthropic")
        ),
    )
}

GROUPS: dict[str, tuple[str, ...]] = {}
for _agent in AGENTS.values():
    GROUPS.setdefault(_agent.group, ())
    GROUPS[_agent.group] = (*GROUPS[_agent.group], _agent.name)
