from django.contrib import admin
from django.urls import include, path

from webapp.actions.api import router as actions_router
from webapp.actions.proposals_api import router as proposals_router
from webapp.actions.tokens_api import router as tokens_router
from webapp.actions.workspaces_api import router as workspaces_router
from webapp.agents.api import api
from webapp.health import healthz

# Here, not in webapp.agents.api: the actions app builds on the agents app, not the reverse.
api.add_router("/v1/actions", actions_router)
api.add_router("/v1/workspaces", workspaces_router)
api.add_router("/v1/proposals", proposals_router)
api.add_router("/v1/tokens", tokens_router)

urlpatterns = [
    path("", include("webapp.queries.urls")),
    path("", include("webapp.runs.urls")),
    path("accounts/", include("webapp.accounts.urls")),
    path("agents/", include("webapp.agents.urls")),
    path("agents/", include("webapp.actions.limits_urls")),  # the actions app builds on agents
    path("social/", include("social_django.urls", namespace="social")),
    path("history/", include("webapp.history.urls")),
    path("audit/", include("webapp.audit.urls")),
    path("review/", include("webapp.actions.urls")),
    path("s/", include("webapp.shares.urls")),
    path("workspaces/", include("webapp.workspaces.urls")),
    path("connections/", include("webapp.connections.urls")),
    path("healthz", healthz, name="healthz"),
    path("api/", api.urls),
    path("admin/", admin.site.urls),
]
