"""A real Prometheus (Debian's `prometheus`) scraping `lockgate proxy --workers 2`: every
panel query of `deploy/grafana/` and every alert rule of `deploy/prometheus/` answered
from its scrapes. `python -m interop.prometheus.run` (see `run.py`, and
docs/operations.md). Opt-in, outside the suite; everything on loopback."""
