"""The Celery app for production mode (REDIS_URL set). Workers: `celery -A webapp worker`.

Tasks are found by autodiscovery (`tasks.py` of each installed app); the worker's start-up
hooks live beside the tasks they serve (webapp.runs.tasks, webapp.reliability.tasks).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
