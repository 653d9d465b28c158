"""The project's URLs plus the agents app's pages (until webapp/urls.py includes them)."""

from django.urls import include, path

from webapp.urls import urlpatterns as project_urlpatterns

urlpatterns = [
    *[p for p in project_urlpatterns if "agents" not in str(getattr(p, "pattern", ""))],
    path("agents/", include("webapp.agents.urls")),
]
