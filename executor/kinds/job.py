"""What every kind's `prepared(...)` context manager yields: the run to start, and its ending.

    with kinds.fs.prepared(spec, limits=limits, workspace=ws, run_id="7") as job:
        result = executor.run(job.spec, limits=job.limits, mounts=job.mounts)
        outcome = job.finish(result)

Leaving the block without `finish()` (an exception, a backend that refused the run) undoes
whatever the preparation reserved: the workspace copy is discarded, the transaction rolled
back, the proxy closed. After `finish()` the outcome owns what is still pending.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from executor.limits import Limits
from executor.policy.mounts import Mount
from executor.spec import RunSpec


@dataclass
class Job:
    spec: RunSpec
    limits: Limits
    mounts: tuple[Mount, ...] = field(default=())

    def __post_init__(self) -> None:
        # A kind's sandbox never has a network of its own: the rest kind's traffic goes
        # through the control folder's proxy socket, the db kind's through the broker's.
        self.limits = dataclasses.replace(self.limits, network="none")
