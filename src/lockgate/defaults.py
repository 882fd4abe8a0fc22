"""The defaults the command line and the library share, in one place that imports nothing
(so that `--help` shows them without importing the client)."""

from __future__ import annotations

IDLE_TIMEOUT_SECONDS = 60.0  # silence that fails a response (the client's watchdog)
DEADLINE_SECONDS = 600.0  # one response in total, from its first opening attempt
MAX_OUTPUT_TOKENS = 2048  # every provider's output-token cap unless told
MAX_TURNS = 10  # the agent loop's turn limit
RECOVERY_BUDGET = 2  # --recover: recoveries in a row before the run stops

RETRY_ATTEMPTS = 3  # openings per response
RETRY_BASE_DELAY = 0.25  # seconds before the first retry, doubled each time
RETRY_MAX_DELAY = 60.0  # the longest wait honoured, the server's included
RETRY_JITTER = 0.10  # ± this fraction of each backoff
