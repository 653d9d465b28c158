"""Settings for bench_api.py: the real ones, with quotas high enough not to throttle the bench."""

from webapp.settings import *  # noqa: F403

AGENTS_RATE_PER_MINUTE = 1_000_000
AGENTS_RATE_BURST = 100_000
AGENTS_MAX_CONCURRENT_PER_TOKEN = 64
