from django.urls import path

from webapp.queries import views

app_name = "queries"

urlpatterns = [
    path("", views.home, name="home"),
    path("queries/new", views.query_create, name="query-create"),
    path("queries/new/by-hand", views.query_create_blank, name="query-create-blank"),
    path("queries/<int:query_id>/", views.query_detail, name="query-detail"),
    path("queries/<int:query_id>/save", views.query_save, name="query-save"),
    path("queries/<int:query_id>/regenerate", views.query_regenerate, name="query-regenerate"),
    path(
        "queries/<int:query_id>/undo-replace",
        views.query_undo_replace,
        name="query-undo-replace",
    ),
]
