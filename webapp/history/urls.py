from django.urls import path

from webapp.history import views

app_name = "history"

urlpatterns = [
    path("", views.history_list_view, name="list"),
    path("<int:query_id>/rerun/", views.history_rerun_view, name="rerun"),
    path("<int:query_id>/delete/", views.history_delete_view, name="delete"),
]
