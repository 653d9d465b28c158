"""The Celery app as a worker process starts it."""

import pytest

from tests.webapp.fresh_interpreter import probe_state


@pytest.mark.parametrize("signal", ["worker_process_init", "worker_ready"])
def test_a_starting_worker_freezes_its_heap_with_the_run_machinery_loaded(tmp_path, signal):
    probe = (
        "import gc, json, sys\n"
        "import django\n"
        "from celery import signals\n"
        "from webapp.celery import app\n"
        "django.setup()\n"
        "app.loader.import_default_modules()\n"
        "loaded_before = 'webapp.runs.execution' in sys.modules\n"
        f"signals.{signal}.send(sender=None)\n"
        "print(json.dumps({'before': loaded_before, 'frozen': gc.get_freeze_count(),\n"
        "                  'after': 'webapp.runs.execution' in sys.modules}))\n"
    )
    state = probe_state(probe, tmp_path)
    assert state == {"before": False, "frozen": state["frozen"], "after": True}
    assert state["frozen"] > 100_000
