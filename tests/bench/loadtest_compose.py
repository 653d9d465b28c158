"""`make loadtest-compose`: tests/bench/loadtest.py, unchanged, on docker-compose.yml's services.

The same phases, counts and pass conditions as `make loadtest`, with its topology (two web
processes, two Celery workers with 8 run slots each) as compose services built from local
images (tests/bench/compose_stack.py): two `web` replicas and two `worker` replicas beside
postgres, redis and worker-kinds, every sandbox made by bubblewrap inside its container. The
stack is torn down (`down -v`) at the end, whatever happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench import loadtest  # noqa: E402
from tests.bench.compose_stack import ComposeStack  # noqa: E402


def compose_topology(
    *, webs: int, workers: int, worker_concurrency: int, extra_env: dict[str, str]
) -> ComposeStack:
    return ComposeStack(
        webs=webs, workers=workers, worker_concurrency=worker_concurrency, extra_env=extra_env
    )


if __name__ == "__main__":
    loadtest.Topology = compose_topology  # type: ignore[assignment,misc]
    sys.exit(loadtest.main())
