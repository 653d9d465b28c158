"""Settings for bench_api.py: the real ones, with quotas high enough not to throttle the bench."""

from webapp.settings import *  # noqa: F403

# A window of one second (BURST * 60 / PER_MINUTE): the moving window keeps one timestamp per
# request in it, so a longer one would make each request of the bench slower to count.
AGENTS_RATE_PER_MINUTE = 600_000
AGENTS_RATE_BURST = 10_000
AGENTS_MAX_CONCURRENT_PER_TOKEN = 64
