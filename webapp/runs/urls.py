from django.urls import path

from webapp.runs import views

app_name = "runs"

urlpatterns = [
    path("queries/<int:query_id>/runs", views.run_create, name="run-create"),
    path("queries/<int:query_id>/runs/list", views.run_list, name="run-list"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<int:run_id>/cancel", views.run_cancel, name="run-cancel"),
    path("runs/<int:run_id>/fix", views.run_fix, name="run-fix"),
    path("runs/<int:run_id>/images/<int:position>", views.run_image, name="run-image"),
]
