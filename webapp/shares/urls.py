from django.urls import path

from webapp.shares import views

app_name = "shares"

urlpatterns = [
    path("", views.share_list_view, name="list"),
    path("create/<int:query_id>/", views.share_create_view, name="create"),
    path("<str:token>/", views.share_detail_view, name="detail"),
    path("<str:token>/revoke/", views.share_revoke_view, name="revoke"),
    path("<str:token>/fork/", views.share_fork_view, name="fork"),
    path("<str:token>/images/<int:position>", views.share_image_view, name="image"),
]
