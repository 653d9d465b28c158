"""The bubblewrap backend: warm sandboxes (pool.py) run one program each (backend.py, loop.py)."""
