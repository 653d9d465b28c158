"""Process limits a server raises for itself at start-up."""

from __future__ import annotations

import logging
import resource

logger = logging.getLogger(__name__)


def open_files_limit_raise() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; return the soft limit now set.

    The usual soft default (1,024) dates from select()'s FD_SETSIZE, which nothing here uses any
    more. Every idle client connection holds a descriptor, and so does every pipe of a sandbox:
    at the default, a thousand connections nobody logged in for leave no descriptor to start a
    sandbox with.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    logger.info("open files limit", extra={"soft_limit": soft, "hard_limit": hard})
    return soft
