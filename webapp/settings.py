"""Undoable settings: one file, every knob an environment variable read through webapp.env.

Embedded default (no variables set): SQLite in var/, in-memory channel layer, runs executed by an
in-process thread pool, bubblewrap sandbox. Production: DATABASE_URL (PostgreSQL) and REDIS_URL
(Celery broker + channels_redis), with `celery worker` processes running the sandboxes.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from webapp.env import (
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_secret,
    env_str,
)
from webapp.redis_client import cache_settings

BASE_DIR = Path(__file__).resolve().parent.parent
# Resolved: sandbox mounts refuse paths that go through a symlink. Importing these settings
# creates nothing: `manage.py migrate` sets this folder up first (webapp/reliability/management/
# commands/migrate.py), and webapp.server.serve its folders.
UNDOABLE_VAR_DIR = Path(env_str("UNDOABLE_VAR_DIR", str(BASE_DIR / "var"))).resolve()

# A single-machine install keeps a generated key in var/ so sessions survive restarts; migrate
# writes it (None: the key is DJANGO_SECRET_KEY's). No key at all leaves SECRET_KEY empty, which
# Django refuses to sign with: never a constant.
_given_secret_key = env_secret("DJANGO_SECRET_KEY")
EMBEDDED_SECRET_KEY_FILE = None if _given_secret_key else UNDOABLE_VAR_DIR / "secret-key"


def _embedded_secret_key(path: Path | None) -> str:
    try:
        return path.read_text().strip() if path else ""
    except FileNotFoundError:
        return ""


SECRET_KEY = _given_secret_key or _embedded_secret_key(EMBEDDED_SECRET_KEY_FILE)
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("DJANGO_BEHIND_TLS_PROXY") else None
)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # its Swagger UI files, served from here (the API docs use no CDN)
    "social_django",
    "webapp.accounts",
    "webapp.queries",
    "webapp.runs",
    "webapp.shares",
    "webapp.agents",
    "webapp.workspaces",
    "webapp.reliability",
    "webapp.connections",
    "webapp.actions",
    "webapp.audit",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "social_django.middleware.SocialAuthExceptionMiddleware",
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "social_django.context_processors.backends",
                "webapp.accounts.context_processors.login_options",
                "webapp.workspaces.context_processors.changes_waiting",
            ],
        },
    },
]

DATABASE_URL = env_secret("DATABASE_URL")


# Runs stream chunks from worker threads while pages read: wait for the write lock; WAL keeps
# each chunk's commit under a millisecond, so live output stays live.
_SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}


def _database_from_url(url: str) -> dj_database_url.DBConfig:
    config = dj_database_url.parse(url)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["OPTIONS"] = dict(_SQLITE_OPTIONS)
    elif config["ENGINE"] == "django.db.backends.postgresql":
        # ASGI serves requests from thread pools; persistent per-thread connections would
        # exhaust PostgreSQL's max_connections under load. psycopg's pool shares a bounded set.
        config["CONN_MAX_AGE"] = 0
        config.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": env_int("UNDOABLE_DB_POOL_SIZE", 10, minimum=1),
            "timeout": 30,
        }
    return config


DATABASES = {
    "default": _database_from_url(DATABASE_URL)
    if DATABASE_URL
    else {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": UNDOABLE_VAR_DIR / "db.sqlite3",
        "OPTIONS": dict(_SQLITE_OPTIONS),
    }
}

# The audit ledger's HMAC key (webapp.audit.keys), kept outside the database so that whoever can
# edit the database cannot re-sign an edited entry. A single-machine install keeps a generated
# one in var/ (migrate writes it); with DATABASE_URL it must be given, or `manage.py check` and
# migrate refuse to go on (DEBUG alone derives one from SECRET_KEY).
UNDOABLE_AUDIT_KEY = env_secret("UNDOABLE_AUDIT_KEY")
EMBEDDED_AUDIT_KEY_FILE = (
    None if UNDOABLE_AUDIT_KEY or DATABASE_URL else UNDOABLE_VAR_DIR / "audit-key"
)
# Exec calls and session cells are counted in memory and added to their minute's tally this
# often (0: only when asked, as tests do); a minute is sealed into one ledger entry this long
# after it ended, once every process has flushed into it.
UNDOABLE_AUDIT_FLUSH_S = env_float("UNDOABLE_AUDIT_FLUSH_S", 10.0, minimum=0)
UNDOABLE_AUDIT_SEAL_AFTER_S = env_float("UNDOABLE_AUDIT_SEAL_AFTER_S", 60.0, minimum=0)


DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "social_core.backends.google.GoogleOAuth2",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "queries:home"
LOGOUT_REDIRECT_URL = "queries:home"

# Google login (social-auth-app-django). The button shows only when both are set.
SOCIAL_AUTH_GOOGLE_OAUTH2_KEY = env_str("GOOGLE_OAUTH2_KEY")
SOCIAL_AUTH_GOOGLE_OAUTH2_SECRET = env_secret("GOOGLE_OAUTH2_SECRET")
SOCIAL_AUTH_JSONFIELD_ENABLED = True
SOCIAL_AUTH_URL_NAMESPACE = "social"
SOCIAL_AUTH_LOGIN_ERROR_URL = "/accounts/login/"
SOCIAL_AUTH_REDIRECT_IS_HTTPS = env_bool("DJANGO_SECURE_COOKIES", False)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = UNDOABLE_VAR_DIR / "staticfiles"  # whitenoise serves from finders; may be empty
WHITENOISE_USE_FINDERS = True

# --- Queue, channel layer and where runs execute -------------------------------------------
REDIS_URL = env_secret("REDIS_URL")
# Where web runs execute (webapp.runs.run_backends): "threads", "celery" or a backend's
# dotted path.
UNDOABLE_RUNNER = env_str("UNDOABLE_RUNNER", "celery" if REDIS_URL else "threads")
# Where the agent API counts its rates, slots and the host's fair share
# (webapp.admission.backends): "process", "redis" or a backend's dotted path.
UNDOABLE_ADMISSION = env_str("UNDOABLE_ADMISSION", "redis" if REDIS_URL else "process")
UNDOABLE_RUNNER_THREADS = env_int("UNDOABLE_RUNNER_THREADS", 4, minimum=1)
# Runs cannot be preempted: while every thread is taken, an owner with nothing running gets one
# more thread for its waiting run, at most this many at once (webapp.runs.runner).
UNDOABLE_RUNNER_LEND = env_int("UNDOABLE_RUNNER_LEND", UNDOABLE_RUNNER_THREADS, minimum=0)
# On SIGTERM, requests and runs in flight get this long to finish (under the 10 s Docker waits
# before its SIGKILL); what is left then ends with a reason (webapp.server.draining).
UNDOABLE_SHUTDOWN_GRACE_S = env_float("UNDOABLE_SHUTDOWN_GRACE_S", 8.0, minimum=0)

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # redis-py's default 5 s socket timeout drops idle websocket consumers (error 1011).
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
            "capacity": 1500,
            "expiry": 30,
        },
    }
    if REDIS_URL
    else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
}

# Django's cache: login throttle counters (webapp.accounts.throttle), runs' stop flags and the
# one-shot credential handoff (webapp.runs.run_backends, webapp.credentials.handoff), shared
# by every web process and worker through Redis in production, in this process when embedded.
CACHES = cache_settings(REDIS_URL)

CELERY_BROKER_URL = REDIS_URL or "memory://"
# Where fs/db/rest runs go (webapp.runs.run_backends.run_queue); empty: the default queue.
UNDOABLE_KINDS_QUEUE = env_str("UNDOABLE_KINDS_QUEUE", "")
CELERY_RESULT_BACKEND = None  # results live in the database; nothing else to leak into Redis
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A queued run's priority is how many runs its owner has ahead of it (run_backends.run_priority):
# one Redis list per level, emptied first to last, so runs start round-robin by owner. With
# prefetch 1 and late acks a busy worker reserves nothing, and the order holds.
CELERY_BROKER_TRANSPORT_OPTIONS = {"priority_steps": list(range(10))}
CELERY_TASK_TIME_LIMIT = env_int("UNDOABLE_TASK_TIME_LIMIT_S", 900, minimum=10)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Credentials travel to Celery workers under a one-shot Redis key with this lifetime.
UNDOABLE_CREDENTIAL_TTL_S = env_int("UNDOABLE_CREDENTIAL_TTL_S", 120, minimum=5)

# A worker touches Run.heartbeat_at this often; a running run silent for UNDOABLE_RUN_LOST_AFTER_S
# is failed as "worker lost" by the reaper (every UNDOABLE_REAPER_INTERVAL_S on each worker); a run
# queued longer than UNDOABLE_RUN_QUEUED_TIMEOUT_S never found a worker.
UNDOABLE_RUN_HEARTBEAT_INTERVAL_S = env_float("UNDOABLE_RUN_HEARTBEAT_INTERVAL_S", 2.0, minimum=0.1)
UNDOABLE_RUN_LOST_AFTER_S = env_float("UNDOABLE_RUN_LOST_AFTER_S", 30.0, minimum=1)
UNDOABLE_RUN_QUEUED_TIMEOUT_S = env_float("UNDOABLE_RUN_QUEUED_TIMEOUT_S", 3600.0, minimum=1)
UNDOABLE_REAPER_INTERVAL_S = env_float("UNDOABLE_REAPER_INTERVAL_S", 5.0, minimum=0.1)

# --- Sandbox -------------------------------------------------------------------------------
EXECUTOR_BACKEND = env_choice("EXECUTOR_BACKEND", "bwrap", ("bwrap", "docker"))
# Host uid of bwrap sandboxes when the server runs as root: no account or program may use it.
EXECUTOR_SANDBOX_UID = env_int("EXECUTOR_SANDBOX_UID", 65600, minimum=1)
EXECUTOR_ROOTFS = Path(env_str("EXECUTOR_ROOTFS", str(UNDOABLE_VAR_DIR / "sandbox-rootfs")))
EXECUTOR_DOCKER_IMAGE = env_str("EXECUTOR_DOCKER_IMAGE", "undoable-sandbox:latest")
EXECUTOR_WARM_POOL_SIZE = env_int("EXECUTOR_WARM_POOL_SIZE", 4, minimum=0)
EXECUTOR_ZYGOTE = env_bool("EXECUTOR_ZYGOTE", True)
# Server-side caps; a request may only lower them.
EXECUTOR_WALL_TIME_S = env_float("EXECUTOR_WALL_TIME_S", 60.0, minimum=0.1)
EXECUTOR_CPU_TIME_S = env_float("EXECUTOR_CPU_TIME_S", 60.0, minimum=0.1)
EXECUTOR_MEMORY_MIB = env_int("EXECUTOR_MEMORY_MIB", 512, minimum=16)
EXECUTOR_MAX_PIDS = env_int("EXECUTOR_MAX_PIDS", 128, minimum=4)
EXECUTOR_MAX_OUTPUT_BYTES = env_int("EXECUTOR_MAX_OUTPUT_BYTES", 1_000_000, minimum=1024)
EXECUTOR_MAX_FILE_SIZE_MIB = env_int("EXECUTOR_MAX_FILE_SIZE_MIB", 64, minimum=1)
EXECUTOR_WORKDIR_QUOTA_MIB = env_int("EXECUTOR_WORKDIR_QUOTA_MIB", 256, minimum=1)
# The query page's rehearsal runs in the background (webapp.actions.rehearsal_jobs); one with no
# verdict this long after it was asked for (a worker that died, a queue that never drained) is
# reported as failed. Two sandbox runs at most EXECUTOR_WALL_TIME_S each, plus a queue's wait.
UNDOABLE_REHEARSAL_WAIT_S = env_int(
    "UNDOABLE_REHEARSAL_WAIT_S", int(2 * EXECUTOR_WALL_TIME_S) + 120, minimum=5
)
# Tests reach local fake services (Slack-like API, PostgreSQL) through the egress proxy.
EXECUTOR_EGRESS_ALLOW_PRIVATE = env_bool("EXECUTOR_EGRESS_ALLOW_PRIVATE", False)

# --- Undoable kinds (fs, db, rest) -----------------------------------------------------------
UNDOABLE_WORKSPACES_ROOT = Path(
    env_str("UNDOABLE_WORKSPACES_ROOT", str(UNDOABLE_VAR_DIR / "workspaces"))
).resolve()
# A db run's transaction is discarded (rolled back) by itself if nobody chooses Keep or Discard
# in time.
UNDOABLE_DB_PENDING_TIMEOUT_S = env_float("UNDOABLE_DB_PENDING_TIMEOUT_S", 600.0, minimum=1)
# A pending fs change nobody keeps or discards is discarded by the reaper after this long.
UNDOABLE_FS_PENDING_TIMEOUT_S = env_float("UNDOABLE_FS_PENDING_TIMEOUT_S", 86400.0, minimum=1)
# A rest action's effect happened when it ran: past this long without Keep or Undo it is
# `expired` (the effect stands; its reverse program can still take it back).
UNDOABLE_REST_PENDING_TIMEOUT_S = env_float("UNDOABLE_REST_PENDING_TIMEOUT_S", 3600.0, minimum=1)
# Each db run holds a db process of its own until Keep, Discard or that timeout: its memory for
# statements, and how many such processes a person and the whole host may hold at once.
UNDOABLE_DB_MEMORY_MIB = env_int("UNDOABLE_DB_MEMORY_MIB", 512, minimum=32)
UNDOABLE_DB_PROCESSES_PER_USER = env_int("UNDOABLE_DB_PROCESSES_PER_USER", 4, minimum=1)
UNDOABLE_DB_PROCESSES_PER_HOST = env_int("UNDOABLE_DB_PROCESSES_PER_HOST", 32, minimum=1)
# Single-user installs may point a query's workspace at one of these server folders.
UNDOABLE_WORKSPACE_SERVER_FOLDERS = env_list("UNDOABLE_WORKSPACE_SERVER_FOLDERS")

# --- Agent API (stateless exec, sessions) ----------------------------------------------------
# Requests per minute per token and how many may burst at once (at most BURST in any
# BURST * 60 / PER_MINUTE seconds, webapp/admission/ratelimit.py). 0: above what this machine's
# cores can run, so one token may use all of it (webapp/admission/capacity.py); the burst 0: 6 s of
# the rate.
AGENTS_RATE_PER_MINUTE = env_int("AGENTS_RATE_PER_MINUTE", 0, minimum=0)
AGENTS_RATE_BURST = env_int("AGENTS_RATE_BURST", 0, minimum=0)
# Runs in flight at once per token (stateless exec and session cells together). Past it a request
# waits up to AGENTS_SLOT_WAIT_S for a slot, if fewer than AGENTS_MAX_WAITING_PER_TOKEN wait;
# waiters hold a thread each of the 256 the web process keeps for runs (webapp/agents/exec_api.py).
AGENTS_MAX_CONCURRENT_PER_TOKEN = env_int("AGENTS_MAX_CONCURRENT_PER_TOKEN", 16, minimum=1)
AGENTS_MAX_WAITING_PER_TOKEN = env_int("AGENTS_MAX_WAITING_PER_TOKEN", 8, minimum=0)
AGENTS_SLOT_WAIT_S = env_float("AGENTS_SLOT_WAIT_S", 5.0, minimum=0)
# Agent runs this machine admits at once, shared fairly between users
# (webapp/admission/fairshare.py; 0: 2 per CPU core). Past a user's share it waits up to
# AGENTS_SLOT_WAIT_S, if fewer than AGENTS_MAX_WAITING_PER_USER of its runs wait.
AGENTS_MAX_RUNS_PER_HOST = env_int("AGENTS_MAX_RUNS_PER_HOST", 0, minimum=0)
AGENTS_MAX_WAITING_PER_USER = env_int("AGENTS_MAX_WAITING_PER_USER", 16, minimum=0)
# How long a web process trusts a token it found active before looking it up again (0: every
# request). A revocation is seen at once by the process that made it, by the others within this.
AGENTS_TOKEN_RECHECK_S = env_float("AGENTS_TOKEN_RECHECK_S", 1.0, minimum=0)
AGENTS_MAX_BODY_BYTES = env_int("AGENTS_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=1024)
# Django refuses to read a body declared past this (default 2.5 MiB) before any cap of ours is
# asked: an exec with its full files and stdin (3 MiB) would be a 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2_621_440, AGENTS_MAX_BODY_BYTES)
AGENTS_MAX_CODE_BYTES = env_int("AGENTS_MAX_CODE_BYTES", 256 * 1024, minimum=1024)
AGENTS_MAX_FILES_BYTES = env_int("AGENTS_MAX_FILES_BYTES", 2 * 1024 * 1024, minimum=0)
AGENTS_MAX_FILES = env_int("AGENTS_MAX_FILES", 64, minimum=0)
AGENTS_MAX_STDIN_BYTES = env_int("AGENTS_MAX_STDIN_BYTES", 1024 * 1024, minimum=0)
AGENTS_DEFAULT_TIMEOUT_S = env_float("AGENTS_DEFAULT_TIMEOUT_S", 10.0, minimum=0.1)
# Threads for the sessions API's other blocking work (its files, its rate), off the event loop.
AGENTS_EXEC_THREADS = env_int("AGENTS_EXEC_THREADS", 32, minimum=1)
AGENTS_MAX_SESSIONS_PER_USER = env_int("AGENTS_MAX_SESSIONS_PER_USER", 8, minimum=1)
AGENTS_SESSION_IDLE_S = env_float("AGENTS_SESSION_IDLE_S", 600.0, minimum=1)
AGENTS_SESSION_MAX_LIFETIME_S = env_float("AGENTS_SESSION_MAX_LIFETIME_S", 3600.0, minimum=1)
AGENTS_SESSION_MAX_FILE_BYTES = env_int(
    "AGENTS_SESSION_MAX_FILE_BYTES", 32 * 1024 * 1024, minimum=1
)
AGENTS_SESSION_MEMORY_MIB = env_int("AGENTS_SESSION_MEMORY_MIB", 512, minimum=16)
AGENTS_SESSION_WORKDIR_QUOTA_MIB = env_int("AGENTS_SESSION_WORKDIR_QUOTA_MIB", 256, minimum=1)
# How the other web processes reach this one (http://10.0.0.5:8000), so a session request that
# arrives at a process not holding the session is passed to the one that does. Empty: it is
# answered 503 instead, and the load balancer must route a session's requests to one process.
UNDOABLE_PEER_URL = env_str("UNDOABLE_PEER_URL")

# --- LLM -----------------------------------------------------------------------------------
LLM_BASE_URL = env_str("LLM_BASE_URL")
LLM_API_KEY = env_secret("LLM_API_KEY")
LLM_MODEL = env_str("LLM_MODEL", "gpt-4o-mini")
LLM_TIMEOUT_S = env_float("LLM_TIMEOUT_S", 60.0, minimum=1)

# --- Service connections (docs/connections.md): OAuth clients; a provider without a client id
# is hidden. Tokens stay in the browser; the server only signs, exchanges, refreshes, revokes.
OAUTH_CLIENTS = {
    name: {
        "client_id": env_str(f"OAUTH_{name.upper()}_CLIENT_ID"),
        "client_secret": env_secret(f"OAUTH_{name.upper()}_CLIENT_SECRET"),
    }
    for name in ("slack", "github", "google", "dropbox", "generic")
}
OAUTH_GENERIC = {
    "name": env_str("OAUTH_GENERIC_NAME", "Other service"),
    "credential": env_str("OAUTH_GENERIC_CREDENTIAL", "OAUTH_TOKEN"),
    "authorize_url": env_str("OAUTH_GENERIC_AUTHORIZE_URL"),
    "token_url": env_str("OAUTH_GENERIC_TOKEN_URL"),
    "revoke_url": env_str("OAUTH_GENERIC_REVOKE_URL"),
    "read_scopes": env_list("OAUTH_GENERIC_READ_SCOPES"),
    "write_scopes": env_list("OAUTH_GENERIC_WRITE_SCOPES"),
}
OAUTH_TIMEOUT_S = env_float("OAUTH_TIMEOUT_S", 15.0, minimum=1)

# --- Logging: one JSON object per line, so logs can be searched and shipped. --------------
UNDOABLE_LOG_LEVEL = env_str("UNDOABLE_LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "webapp.json_logs.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": UNDOABLE_LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- Accounts (issue 4) ----------------------------------------------------------------------
# The default pipeline (no association by email: an address at Google is not proof of owning a
# local account with that address), with load_extra_data replaced by a step that keeps no tokens.
SOCIAL_AUTH_PIPELINE = (
    "social_core.pipeline.social_auth.social_details",
    "social_core.pipeline.social_auth.social_names",
    "social_core.pipeline.social_auth.social_uid",
    "social_core.pipeline.social_auth.auth_allowed",
    "social_core.pipeline.social_auth.social_user",
    "social_core.pipeline.user.get_username",
    "social_core.pipeline.user.create_user",
    "social_core.pipeline.social_auth.associate_user",
    "webapp.accounts.pipeline.load_extra_data_without_tokens",
    "social_core.pipeline.user.user_details",
)
# Local username/password sign-up. Open by default only on the embedded single machine: where
# the public may reach a production install, each free account would be another set of per-user
# caps. Turn it off where only Google (or admin-made) accounts may enter.
UNDOABLE_ALLOW_SIGNUP = env_bool("UNDOABLE_ALLOW_SIGNUP", not (REDIS_URL or DATABASE_URL))
# Login throttling (webapp.accounts.throttle): this many wrong passwords for one username, or
# from one client address, within the window lock that username or address out for a while.
UNDOABLE_LOGIN_MAX_FAILURES = env_int("UNDOABLE_LOGIN_MAX_FAILURES", 5, minimum=1)
ACCOUNTS_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int(
    "UNDOABLE_LOGIN_MAX_FAILURES_PER_ADDRESS", 20, minimum=1
)
UNDOABLE_LOGIN_FAILURE_WINDOW_S = env_int("UNDOABLE_LOGIN_FAILURE_WINDOW_S", 60, minimum=1)
UNDOABLE_LOGIN_LOCKOUT_S = env_int("UNDOABLE_LOGIN_LOCKOUT_S", 300, minimum=1)
