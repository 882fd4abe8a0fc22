"""The agents people run (Codex, Claude Code, Gemini CLI, the Vercel AI SDK), headless,
against a hostile loopback server that answers with a call to the agent's own shell tool
and then completes or breaks the response: directly, and through `lockgate proxy`.

`python -m interop.agents.run` (see `run.py` and README.md here). Opt-in: it installs the
agents from the npm registry into a cache folder outside the repository.
"""
