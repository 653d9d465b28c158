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
    path("queries/<int:query_id>/runs", views.run_create, name="run-create"),
    path("queries/<int:query_id>/runs/list", views.run_list, name="run-list"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<int:run_id>/cancel", views.run_cancel, name="run-cancel"),
    path("runs/<int:run_id>/fix", views.run_fix, name="run-fix"),
    path("runs/<int:run_id>/images/<int:position>", views.run_image, name="run-image"),
]
