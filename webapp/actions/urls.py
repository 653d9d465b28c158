from django.urls import path

from webapp.actions import views

app_name = "actions"

urlpatterns = [
    path("", views.review_inbox, name="review"),
    path("list", views.review_list, name="review-list"),
    path("<int:query_id>/keep", views.review_keep, name="review-keep"),
    path("<int:query_id>/rehearse", views.query_rehearse, name="rehearse"),
    path("<int:query_id>/rehearsal", views.query_rehearsal, name="rehearsal"),
]
