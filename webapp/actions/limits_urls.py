from django.urls import path

from webapp.actions import limits_views

app_name = "limits"

urlpatterns = [
    path("tokens/<int:token_id>/limits/", limits_views.token_limits_view, name="token-limits"),
]
