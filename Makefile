# Undoable: `make run` serves the app on http://127.0.0.1:8000, `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ROOTFS := var/sandbox-rootfs
LAUNCHER := executor/launcher/undoable-launch
SANDBOX_IMAGE ?= undoable-sandbox:latest
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-unit test-browser test-sabotage test-fault compose-smoke bench loadtest lint format sandbox-image sandbox-rootfs \
        sandbox launcher docker-image prereqs migrate frontend clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	# The replit-code-exec client, to prove /api/v1/exec speaks its protocol. It pins an old
	# `instructor` it never needs for code_exec(), so it goes in without its dependencies.
	$(PY) -m pip install -q --no-deps replit-code-exec==0.0.1
	touch $@

prereqs:
	@command -v bwrap >/dev/null && command -v $(CC) >/dev/null || { echo "bubblewrap or a C compiler is missing. Run: sudo apt-get install -y bubblewrap debootstrap gcc libc6-dev"; exit 1; }

$(ROOTFS)/etc/undoable-rootfs-built:
	bash executor/image/build-rootfs.sh $(ROOTFS)

sandbox-rootfs: prereqs $(ROOTFS)/etc/undoable-rootfs-built

# The host-side launcher of every bwrap sandbox (joins its cgroups, drops root, hard-kills it).
# Static: no dynamic loader to run on each of the hundreds of sandbox starts per second.
$(LAUNCHER): executor/launcher/undoable-launch.c | prereqs
	$(CC) -O2 -Wall -Wextra -Werror -static -o $@ $<

launcher: $(LAUNCHER)

# Everything the bwrap backend needs on this host.
sandbox: sandbox-rootfs launcher

# The Docker backend's image: the same root filesystem, imported without any registry pull.
sandbox-image: sandbox-rootfs
	bash executor/image/import-image.sh $(ROOTFS) $(SANDBOX_IMAGE)

migrate: $(VENV)/.installed
	$(PY) manage.py migrate --noinput

run: $(VENV)/.installed sandbox migrate
	$(VENV)/bin/daphne -b $(HOST) -p $(PORT) webapp.asgi:application

test: $(VENV)/.installed sandbox test-unit test-browser test-fault

test-unit: $(VENV)/.installed $(LAUNCHER)
	$(PY) -m pytest -m "not browser and not fault" $(PYTEST_ARGS)

# Playwright's sync API runs its own event loop; keep it out of the asyncio tests' process.
test-browser: $(VENV)/.installed $(LAUNCHER)
	$(PY) -m pytest -m browser $(PYTEST_ARGS)

test-sabotage: $(VENV)/.installed $(LAUNCHER)
	$(PY) -m pytest -m sabotage $(PYTEST_ARGS)

test-fault: $(VENV)/.installed $(LAUNCHER)
	$(PY) -m pytest -m fault $(PYTEST_ARGS)

bench: $(VENV)/.installed sandbox
	$(PY) tests/bench/bench_executor.py
	$(PY) tests/bench/bench_api.py
	$(PY) tests/bench/bench_stream.py
	$(PY) tests/bench/bench_db.py

# Build and start the docker-compose topology from local images only, run code, tear it down.
compose-smoke: sandbox-image
	bash tests/fault/compose_smoke.sh

loadtest: $(VENV)/.installed sandbox
	$(PY) tests/bench/loadtest.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy executor webapp

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Rebuild static/vendor/ (committed, so running the app never needs Node).
frontend:
	cd static/frontend && npm install --no-audit --no-fund && npm run build

clean:
	rm -rf $(VENV) var/tmp $(LAUNCHER)
