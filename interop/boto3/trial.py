"""A boto3 framework against `lockgate serve --provider bedrock`, directly and through the
in-process gate (`gated_bedrock`), as a new user would run it. Opt-in: run it with a Python
where the framework and lockgate are installed (a scratch venv, not the project's):

    python -m venv /tmp/bt && /tmp/bt/bin/pip install strands-agents langchain-aws \
        'pydantic-ai-slim[bedrock]' -e .
    /tmp/bt/bin/python -m interop.boto3.trial      # every framework x scenario x path
    /tmp/bt/bin/python -m interop.boto3.trial --frameworks strands \
        --scenarios bedrock-cut-in-payload

Each run starts `lockgate serve` on loopback with one lab scenario, gives the framework one
tool, `edit` (what the lab's calls name), and one prompt; the tool records each call it ran.
A line per run: the framework, the path (direct / gate), the scenario, whether `edit` ran,
and how the run ended (its answer, or the error the framework raised).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3  # type: ignore[import-untyped, import-not-found, unused-ignore]
import botocore.config  # type: ignore[import-untyped, import-not-found, unused-ignore]

from lockgate import gated_bedrock

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
SCENARIOS = (
    "bedrock-tool-use",  # a complete session: the edit runs, the answer follows
    "bedrock-cut-in-payload",  # a complete call, the body then cut inside messageStop
    "bedrock-no-message-stop",  # every block closed, then a clean end without messageStop
    "bedrock-cut-metadata",  # messageStop arrived, then the metadata after it is cut
    "second-call-invalid",  # a valid edit, then an edit missing an argument
    "bedrock-malformed-tool-use",  # Bedrock's own verdict on the call
)
PROMPT = "Fix the bug in calculator.py."
ran: list[dict[str, str]] = []  # the edits the tool ran, this run


def edit(path: str, old: str, new: str) -> str:
    """Replace the text `old` with `new` in the file `path`."""
    ran.append({"path": path, "old": old, "new": new})
    return f"edited {path}"


@contextmanager
def served(scenario: str) -> Iterator[str]:
    command = [sys.executable, "-m", "lockgate", "serve", "--provider", "bedrock"]
    process = subprocess.Popen(
        [*command, "--scenario", scenario, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        found = re.search(r"http://127\.0\.0\.1:\d+", process.stdout.readline())
        if found is None:
            raise RuntimeError("lockgate serve did not say where it listens")
        yield found.group(0)
    finally:
        process.terminate()
        process.wait(10)


def session() -> Any:
    return boto3.Session(
        aws_access_key_id="lab-not-a-secret",
        aws_secret_access_key="lab-not-a-secret",  # a loopback stand-in
        region_name="us-east-1",
    )


def config() -> Any:
    return botocore.config.Config(retries={"total_max_attempts": 1}, read_timeout=10)


def run_strands(url: str, gate: bool) -> str:
    from strands import Agent, tool  # type: ignore[import-not-found, unused-ignore]
    from strands.models.bedrock import BedrockModel  # type: ignore[import-not-found, unused-ignore]

    boto = session()
    if gate:
        gated_bedrock(boto)  # every client made from this session is gated
    model = BedrockModel(
        model_id=MODEL, boto_session=boto, endpoint_url=url, boto_client_config=config()
    )
    agent = Agent(model=model, tools=[tool(edit)], callback_handler=None)
    return str(agent(PROMPT)).strip()


def run_langchain(url: str, gate: bool) -> str:
    from langchain_aws import ChatBedrockConverse  # type: ignore[import-not-found, unused-ignore]
    from langchain_core.messages import (  # type: ignore[import-not-found, unused-ignore]
        HumanMessage,
        ToolMessage,
    )

    client = session().client("bedrock-runtime", endpoint_url=url, config=config())
    if gate:
        gated_bedrock(client)
    llm = ChatBedrockConverse(model=MODEL, client=client).bind_tools([edit])
    messages: list[Any] = [HumanMessage(PROMPT)]
    for _ in range(4):  # the loop a langchain user writes: stream, run the calls, go on
        reply: Any = None
        for chunk in llm.stream(messages):
            reply = chunk if reply is None else reply + chunk
        messages.append(reply)
        if not reply.tool_calls:
            return str(reply.text).strip()
        for call in reply.tool_calls:
            result = edit(**call["args"])
            messages.append(ToolMessage(result, tool_call_id=call["id"]))
    return "(no answer after 4 turns)"


def run_pydantic_ai(url: str, gate: bool) -> str:
    from pydantic_ai import Agent as PydanticAgent  # type: ignore[import-not-found, unused-ignore]
    from pydantic_ai.models.bedrock import (  # type: ignore[import-not-found, unused-ignore]
        BedrockConverseModel,
    )
    from pydantic_ai.providers.bedrock import (  # type: ignore[import-not-found, unused-ignore]
        BedrockProvider,
    )

    client = session().client("bedrock-runtime", endpoint_url=url, config=config())
    if gate:
        gated_bedrock(client)
    model = BedrockConverseModel(MODEL, provider=BedrockProvider(bedrock_client=client))
    agent = PydanticAgent(model, tools=[edit])

    async def streamed(_context: Any, events: Any) -> None:  # streams: converse_stream
        async for _ in events:
            pass

    return str(agent.run_sync(PROMPT, event_stream_handler=streamed).output).strip()


FRAMEWORKS: dict[str, Callable[[str, bool], str]] = {
    "strands": run_strands,
    "langchain-aws": run_langchain,
    "pydantic-ai": run_pydantic_ai,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interop.boto3.trial")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--via", default="direct,gate")
    options = parser.parse_args(argv)
    for framework in options.frameworks.split(","):
        for scenario in options.scenarios.split(","):
            for via in options.via.split(","):
                ran.clear()
                with served(scenario) as url:
                    try:
                        ended = "answered: " + FRAMEWORKS[framework](url, via == "gate")[:60]
                    except Exception as exc:
                        ended = f"raised {type(exc).__name__}: {str(exc)[:140]}"
                verdict = f"ran edit x{len(ran)}" if ran else "ran nothing"
                print(f"{framework:14} {via:6} {scenario:28} {verdict:12} {ended}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
