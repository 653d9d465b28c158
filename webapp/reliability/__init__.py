"""Reliability of the production topology: no run stays queued or running forever.

- `reaper`: the thread that calls the apps' reap functions every interval (webapp.runs ends runs
  whose worker stopped beating "Worker lost"; webapp.workspaces ends orphaned changes). It
  imports neither: each app adds its function in its AppConfig.ready().
- `workers`: who is alive (Celery ping, a Redis registry of live processes) and the per-worker
  queue that pins stateful work to the worker holding it.
- `tasks`: Celery signal hooks that start both inside every worker.
- management commands: `manage.py workers_ping` (health check for compose/k8s) and `runs_reap`.
"""
