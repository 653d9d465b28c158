"""The Celery app as a worker process starts it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("signal", ["worker_process_init", "worker_ready"])
def test_a_starting_worker_freezes_its_heap_with_the_run_machinery_loaded(tmp_path, signal):
    # A fresh interpreter, as a worker's: this test process has imported everything already.
    probe = (
        "import gc, json, sys\n"
        "import django\n"
        "from celery import signals\n"
        "from webapp.celery import app\n"
        "django.setup()\n"
        "app.loader.import_default_modules()\n"
        "loaded_before = 'webapp.queries.execution' in sys.modules\n"
        f"signals.{signal}.send(sender=None)\n"
        "print(json.dumps({'before': loaded_before, 'frozen': gc.get_freeze_count(),\n"
        "                  'after': 'webapp.queries.execution' in sys.modules}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "UNDOABLE_VAR_DIR": str(tmp_path)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state == {"before": False, "frozen": state["frozen"], "after": True}
    assert state["frozen"] > 100_000
