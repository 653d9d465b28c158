# The Celery app loads with Django, so tasks enqueued from the web process use its settings.
from webapp.celery import app as celery_app

__all__ = ["celery_app"]
