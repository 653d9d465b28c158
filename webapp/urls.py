from django.contrib import admin
from django.urls import include, path

from webapp.agents.api import api

urlpatterns = [
    path("", include("webapp.queries.urls")),
    path("accounts/", include("webapp.accounts.urls")),
    path("social/", include("social_django.urls", namespace="social")),
    path("s/", include("webapp.shares.urls")),
    path("api/", api.urls),
    path("admin/", admin.site.urls),
]
