"""Stateful sessions: a long-lived sandbox per session running a REPL driver (manager.py)."""
