"""Undoable execution kinds: runs whose effects wait for Keep or Discard.

- fs: the run works on a private copy of a workspace folder (executor.kinds.fs).
- db: the run's database work stays in an open transaction (executor.kinds.db).
- rest: the run reaches only allowlisted hosts, through an egress proxy (executor.kinds.egress).
"""
