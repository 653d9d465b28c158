"""Run a probe in a fresh interpreter, as a server or worker process starts: the test process
itself has imported everything already, so what start-up loads can only be seen from outside."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def probe_state(probe: str, var_dir: Path) -> Any:
    """Run `probe` (Python source whose last printed line is JSON) and return that JSON."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "UNDOABLE_VAR_DIR": str(var_dir)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])
