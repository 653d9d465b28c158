#!/usr/bin/env bash
# Build and really start the docker-compose topology without any registry, then check that the
# app answers, that web runs an exec and an agent session with bubblewrap inside its container
# (no Docker socket, not privileged), and that web runs reach both kinds of worker; always `down`.
#
#   bash tests/fault/compose_smoke.sh            (needs dockerd, the sandbox rootfs and image)
#
# Images come from tests/fault/compose_images.sh: no registry, the sandbox root filesystem as base.
set -euo pipefail
cd "$(dirname "$0")/../.."

base=${BASE_IMAGE:-undoable-base:local}
port=${UNDOABLE_PORT:-18480}
project=undoable-smoke-$$
compose() {
  if docker compose version >/dev/null 2>&1; then
    docker compose -p "$project" "$@"
  else
    docker-compose -p "$project" "$@"
  fi
}
say() { printf '[compose-smoke %4ss] %s\n' "$SECONDS" "$*"; }

export BASE_IMAGE=$base UNDOABLE_PORT=$port UNDOABLE_BIND=127.0.0.1
export DJANGO_SECRET_KEY=$(head -c 32 /dev/urandom | base64)
export POSTGRES_PASSWORD=$(head -c 12 /dev/urandom | base64 | tr -d '/+=')

cleanup() {
  status=$?
  if [ "$status" != 0 ]; then
    compose logs --no-color --tail=60 >&2 || true
  fi
  compose down -v --remove-orphans >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT

say "building images on $base"
BASE_IMAGE=$base bash tests/fault/compose_images.sh "$project"
say "starting postgres, redis, migrate, web and 2 workers"
compose up -d --scale worker=2

say "waiting for /healthz"
for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then break; fi
  sleep 1
done
curl -fsS "http://127.0.0.1:$port/healthz"; echo

say "waiting for the 3 workers (2 worker, 1 worker-kinds) to answer a Celery ping"
for _ in $(seq 1 60); do
  alive=$(compose exec -T -u undoable worker python3 manage.py workers_ping --count 2>/dev/null || echo 0)
  [ "${alive//[^0-9]/}" = 3 ] && break
  sleep 1
done
[ "${alive//[^0-9]/}" = 3 ] || { echo "expected 3 live workers, got: $alive" >&2; exit 1; }

say "creating a user and an API token"
compose exec -T -u undoable web python3 manage.py shell -c \
  "from django.contrib.auth import get_user_model; get_user_model().objects.create_user('smoke', password='smoke-pass-123')"
token=$(compose exec -T -u undoable web python3 manage.py create_api_token smoke 2>/dev/null | tr -d '\r\n')

say "web: bwrap backend, no Docker socket, not privileged, uid 10001 with no capabilities"
web_id=$(compose ps -q web)
docker inspect -f 'privileged={{.HostConfig.Privileged}} cap_add={{.HostConfig.CapAdd}}' "$web_id"
[ "$(docker inspect -f '{{.HostConfig.Privileged}}' "$web_id")" = false ] || { echo "web is privileged" >&2; exit 1; }
# The server itself (pid 1, after the entrypoint dropped root), not a `compose exec` beside it.
compose exec -T -u undoable web sh -c 'grep -E "^(Uid|CapEff|CapBnd|NoNewPrivs|Seccomp):" /proc/1/status;
  [ "$EXECUTOR_BACKEND" = bwrap ] && [ ! -e /var/run/docker.sock ] \
  && grep -qE "^Uid:\s+10001\s" /proc/1/status && grep -qE "^CapEff:\s+0+$" /proc/1/status \
  && grep -qE "^CapBnd:\s+0+$" /proc/1/status && grep -qE "^Seccomp:\s+2$" /proc/1/status'

# A bwrap sandbox is a user namespace mapping one uid; a Docker sandbox has the engine's full map.
say "running code through /api/v1/exec (in a bwrap sandbox: a user namespace of one uid)"
out=$(curl -fsS -X POST "http://127.0.0.1:$port/api/v1/exec" \
  -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"code": "import sys; print(6 * 7); print(sys.version_info[0]); print(open(\"/proc/self/uid_map\").read().split()[2])"}')
echo "$out"
[ "$(printf '%s' "$out" | head -1)" = 42 ] || { echo "unexpected output from /api/v1/exec" >&2; exit 1; }
[ "$(printf '%s' "$out" | sed -n 3p)" = 1 ] || { echo "the exec did not run under bwrap" >&2; exit 1; }

say "a run past the memory cap is OOM-killed in its own cgroup (not stopped by RLIMIT_AS alone)"
oom=$(curl -fsS -X POST "http://127.0.0.1:$port/api/v1/exec" \
  -H "Authorization: Bearer $token" -H 'Content-Type: application/json' -H 'Accept: application/json' \
  -d '{"code": "x = bytes([1]) * (600 * 1024 * 1024)"}')
echo "$oom"
printf '%s' "$oom" | python3 -c 'import json, sys; r = json.load(sys.stdin); sys.exit(not r["oom_killed"] or r["limit"] != "memory")' \
  || { echo "no per-sandbox memory cgroup in web" >&2; exit 1; }

say "an agent session on web: state kept between cells, a file put and read back, deleted"
api() {
  local method=$1 path=$2
  shift 2
  curl -fsS -X "$method" "http://127.0.0.1:$port/api/v1$path" -H "Authorization: Bearer $token" "$@"
}
session=$(api POST /sessions | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
api PUT "/sessions/$session/files/notes.txt" --data-binary 'from the smoke test' >/dev/null
api POST "/sessions/$session/exec" -H 'Content-Type: application/json' -d '{"code": "x = 6"}' >/dev/null
cell=$(api POST "/sessions/$session/exec" -H 'Content-Type: application/json' \
  -d '{"code": "print(x * 7, open(\"notes.txt\").read())"}')
echo "$cell"
printf '%s' "$cell" | python3 -c 'import json, sys; r = json.load(sys.stdin); sys.exit(r["stdout"] != "42 from the smoke test\n" or r["exit_code"] != 0)' \
  || { echo "unexpected session cell result" >&2; exit 1; }
api DELETE "/sessions/$session" >/dev/null

say "running a web run through a Celery worker (bwrap)"
compose exec -T -u undoable web python3 manage.py shell <<'PY'
import time
from django.contrib.auth import get_user_model
from webapp.queries.models import Query
from webapp.runs.models import Run
from webapp.runs.services import query_run
owner = get_user_model().objects.get(username="smoke")
query = Query.objects.create(owner=owner, prompt="smoke", forward_code="print('from a worker')")
run = query_run(query=query)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not Run.objects.get(pk=run.pk).is_final:
    time.sleep(0.2)
run.refresh_from_db()
text = "".join(run.chunks.values_list("text", flat=True))
print(run.status, repr(text))
assert run.status == "succeeded" and "from a worker" in text, (run.status, run.error)
PY

say "db runs on worker-kinds (bubblewrap): one kept on the workspace web sees, one hostile discarded"
compose exec -T -u undoable web python3 manage.py shell <<'PY'
import socket, sqlite3, time
from django.contrib.auth import get_user_model
from webapp.queries.models import Query
from webapp.runs.models import Run
from webapp.runs.services import query_run
from webapp.workspaces import services as ws
from webapp.workspaces.models import ChangeStatus, PendingChange

owner = get_user_model().objects.get(username="smoke")

def db_run(code, *, keep):
    """Run `code` as a db query, then Keep or Discard its pending transaction; the run."""
    query = Query.objects.create(owner=owner, prompt="smoke db", kind="db", forward_code=code)
    run = query_run(query=query)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not Run.objects.get(pk=run.pk).is_final:
        time.sleep(0.2)
    run.refresh_from_db()
    change = PendingChange.objects.get(run=run)
    assert change.status == ChangeStatus.PENDING, (run.status, run.error, change.message)
    ws.change_keep(change=change) if keep else ws.change_discard(change=change)
    # The transaction is held by worker-kinds, which sees the choice in the database.
    settled = (ChangeStatus.KEPT, ChangeStatus.DISCARDED)
    while time.monotonic() < deadline and PendingChange.objects.get(pk=change.pk).status not in settled:
        time.sleep(0.2)
    change.refresh_from_db()
    assert change.status == (ChangeStatus.KEPT if keep else ChangeStatus.DISCARDED), change.message
    text = "".join(run.chunks.values_list("text", flat=True))
    print(run.status, run.worker, text, sep="\n")
    assert run.worker.startswith("kinds@"), run.worker
    return run, text, ws.workspace_for_query(query)

run, _, workspace = db_run("db.execute('CREATE TABLE kept (x)')", keep=True)
assert run.status == "succeeded", (run.status, run.error)
tables = sqlite3.connect(workspace.root / "database.sqlite3").execute(
    "SELECT name FROM sqlite_master").fetchall()
assert tables == [("kept",)], tables

# The worker container's files, environment and neighbours, by name and by address (resolved
# here: no name lookup inside is not the whole story).
services = {"redis": 6379, "postgres": 5432, "web": 8000}
targets = [(name, (name, port)) for name, port in services.items()] + [
    (f"{name} by address", (socket.gethostbyname(name), services[name]))
    for name in ("redis", "postgres")
]
probe = "\n".join([
    "import os, socket",
    "def attempt(what, action):",
    "    try:",
    "        action()",
    "        print(what, 'REACHED')",
    "    except OSError as exc:",
    "        print(what, 'blocked', type(exc).__name__)",
    "def worker_env():",
    "    if not {'DJANGO_SECRET_KEY', 'DATABASE_URL', 'REDIS_URL'} & set(os.environ):",
    "        raise OSError('not in the environment')",
    "attempt('app code', lambda: open('/app/webapp/settings.py').read())",
    "attempt('worker env', worker_env)",
    f"for what, address in {targets!r}:",
    "    attempt(what, lambda: socket.create_connection(address, timeout=3).close())",
])
_, text, _ = db_run(probe, keep=False)
for what in ["app code", "worker env", *(name for name, _ in targets)]:
    assert f"{what} blocked" in text, (what, text)
assert "REACHED" not in text, text
PY

say "ok: compose topology built, healthy, and ran code in web (exec and session), worker and worker-kinds"
