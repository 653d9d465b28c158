"""Every deny case of the hostile suite, in one list (the sabotage proof runs them all)."""

from __future__ import annotations

import deny_fs
import deny_limits
import deny_net
import deny_proc
from hostile_kit import DenyCase

ALL_DENY_CASES: list[DenyCase] = [
    *deny_limits.CASES,
    *deny_proc.CASES,
    *deny_fs.CASES,
    *deny_net.CASES,
]
