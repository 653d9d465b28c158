from django.urls import path

from webapp.workspaces import views

app_name = "workspaces"

urlpatterns = [
    path("queries/<int:query_id>/panel", views.panel, name="panel"),
    path("queries/<int:query_id>/upload", views.upload, name="upload"),
    path("queries/<int:query_id>/download", views.download, name="download"),
    path("queries/<int:query_id>/hosts", views.hosts, name="hosts"),
    path(
        "queries/<int:query_id>/regenerate-reverse",
        views.regenerate_reverse,
        name="regenerate-reverse",
    ),
    path("changes/<int:change_id>/keep", views.change_keep, name="change-keep"),
    path("changes/<int:change_id>/discard", views.change_discard, name="change-discard"),
]
