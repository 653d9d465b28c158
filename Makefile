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
# Every Python package version, runtime and dev, comes from here (`make constraints` rewrites it).
CONSTRAINTS := requirements/constraints.txt
PIP_INSTALL = $(PY) -m pip install -q -c $(CONSTRAINTS)
.PHONY: run test test-unit test-browser test-sabotage test-fault compose-smoke bench loadtest lint format sandbox-image sandbox-rootfs \
        sandbox launcher docker-image prereqs migrate frontend clean constraints

# The runtime dependencies only: what `make run` serves with.
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PIP_INSTALL) -e .
	touch $@

# On top, for test, lint, bench and loadtest: the dev tools and the Docker backend's client.
$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP_INSTALL) -e '.[dev,docker]'
	# The replit-code-exec client, to prove /api/v1/exec speaks its protocol. It pins an old
	# `instructor` it never needs for code_exec(), so it goes in without its dependencies.
	$(PY) -m pip install -q --no-deps replit-code-exec==0.0.1
	touch $@

prereqs:
	@command -v bwrap >/dev/null && command -v $(CC) >/dev/null || { echo "bubblewrap or a C compiler is missing. Run: sudo apt-get install -y bubblewrap debootstrap gcc libc6-dev"; exit 1; }

# Rewrite $(CONSTRAINTS) from pyproject.toml (runtime + dev + docker), keeping the pins that
# still fit; `make constraints PIP_COMPILE_ARGS=--upgrade` moves everything to the newest.
# pip-tools lives in a throwaway venv, never in the project's.
constraints:
	rm -rf var/tmp/pip-tools && $(PYTHON) -m venv var/tmp/pip-tools
	var/tmp/pip-tools/bin/pip install -q pip-tools
	CUSTOM_COMPILE_COMMAND="make constraints" var/tmp/pip-tools/bin/pip-compile -q --strip-extras \
	  --allow-unsafe --no-emit-find-links --no-emit-index-url --extra dev --extra docker \
	  $(PIP_COMPILE_ARGS) -o $(CONSTRAINTS) pyproject.toml
	rm -rf var/tmp/pip-tools

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

test: $(VENV)/.installed-dev sandbox test-unit test-browser test-fault

test-unit: $(VENV)/.installed-dev $(LAUNCHER)
	$(PY) -m pytest -m "not browser and not fault" $(PYTEST_ARGS)

# Playwright's sync API runs its own event loop; keep it out of the asyncio tests' process.
test-browser: $(VENV)/.installed-dev $(LAUNCHER)
	$(PY) -m pytest -m browser $(PYTEST_ARGS)

test-sabotage: $(VENV)/.installed-dev $(LAUNCHER)
	$(PY) -m pytest -m sabotage $(PYTEST_ARGS)

test-fault: $(VENV)/.installed-dev $(LAUNCHER)
	$(PY) -m pytest -m fault $(PYTEST_ARGS)

bench: $(VENV)/.installed-dev sandbox
	$(PY) tests/bench/bench_executor.py
	$(PY) tests/bench/bench_api.py
	$(PY) tests/bench/bench_stream.py
	$(PY) tests/bench/bench_db.py

# Build and start the docker-compose topology from local images only, run code, tear it down.
compose-smoke: sandbox-image
	bash tests/fault/compose_smoke.sh

loadtest: $(VENV)/.installed-dev sandbox
	$(PY) tests/bench/loadtest.py

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy executor webapp

format: $(VENV)/.installed-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Rebuild static/vendor/ (committed, so running the app never needs Node).
frontend:
	cd static/frontend && npm install --no-audit --no-fund && npm run build

clean:
	rm -rf $(VENV) var/tmp $(LAUNCHER)
