"""Celery hooks: every worker runs a reaper, beats in the live-process registry, and consumes
its own pinned queue. Loaded by the Celery app's autodiscovery (webapp.reliability is an
installed app), before the worker is ready, so `celery -A webapp worker` needs no extra flag.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from webapp.reliability.reaper import ReaperThread
from webapp.reliability.workers import BeatThread, pinned_queue

logger = logging.getLogger(__name__)

_threads: list[ReaperThread | BeatThread] = []


@worker_ready.connect
def _on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    # `sender` is the worker's Consumer; the queue is added without restarting anything.
    hostname = sender.hostname
    sender.add_task_queue(pinned_queue(hostname))
    threads: list[ReaperThread | BeatThread] = [ReaperThread(), BeatThread(hostname)]
    for thread in threads:
        thread.start()
    _threads.extend(threads)
    logger.info("worker ready", extra={"worker": hostname, "pinned_queue": pinned_queue(hostname)})


@worker_shutdown.connect
def _on_worker_shutdown(**kwargs: Any) -> None:
    for thread in _threads:
        thread.stop()
    for thread in _threads:
        thread.join(timeout=5)
    _threads.clear()
