"""Reliability of the production topology: no run stays queued or running forever.

- `reaper`: runs whose worker stopped beating (killed, machine gone) end `failed` "Worker lost".
- `workers`: who is alive (Celery ping, a Redis registry of live processes) and the per-worker
  queue that pins stateful work to the worker holding it.
- `tasks`: Celery signal hooks that start both inside every worker.
- management commands: `manage.py workers_ping` (health check for compose/k8s) and `runs_reap`.
"""
