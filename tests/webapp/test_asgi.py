"""The ASGI entry point as a server process starts it."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_server_starts_with_every_view_loaded_and_kept_out_of_full_collections(tmp_path):
    # A fresh interpreter, as daphne's: this test process has imported everything already.
    probe = (
        "import gc, json, sys\n"
        "import webapp.asgi\n"
        "state = {'frozen': gc.get_freeze_count(), 'unfrozen': len(gc.get_objects())}\n"
        "state.update(urls='webapp.urls' in sys.modules, llm='openai' in sys.modules)\n"
        "print(json.dumps(state))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "UNDOABLE_VAR_DIR": str(tmp_path)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    state = json.loads(done.stdout.strip().splitlines()[-1])
    # The views and what they import (the LLM client among them) were loaded before the
    # freeze, so a full collection no longer walks them.
    assert state["urls"] and state["llm"]
    assert state["frozen"] > 10 * state["unfrozen"]
