"""Opt-in measurements of lockgate between gateways (issue 24): not part of the test suite.

- `proxy_faults`: gateway-style faults (429 with `retry-after`, 500, a reset before the
  head, a persistent 503 with a fall-back, silence, a cut mid-answer) through
  `lockgate proxy --config` with retries and a fall-back, driven by the official SDKs.
- `litellm_topologies`: LiteLLM's proxy in both topologies around `lockgate proxy`
  (client → LiteLLM → lockgate → provider, and client → lockgate → LiteLLM → provider).
- `upstream`: the loopback fault server both drive (the "provider").

Each is a script (`python -m interop.gateways.<name> --help`); they talk only to loopback
servers they start, with fake keys.

`scenarios` (the faults both play) and `model` (what a scenario is: attempts, answers, the
`edit` tool) are their shared parts, not scripts; imports run one way: `upstream` →
`scenarios` → `model`.
"""
