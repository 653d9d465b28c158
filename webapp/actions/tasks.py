"""Celery tasks of the actions app, here for the workers' autodiscovery (`tasks.py` of each
installed app). Tasks take ids only: credentials travel through the one-shot handoff
(webapp.credentials.handoff), never in a task message."""

from webapp.actions.rehearsal_jobs import rehearse_query

__all__ = ["rehearse_query"]
