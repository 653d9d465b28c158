from django.urls import path

from webapp.agents import views

app_name = "agents"

urlpatterns = [
    path("tokens/new/", views.token_create_view, name="token-create"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke_view, name="token-revoke"),
]
