from django.urls import path

from webapp.connections import views

app_name = "connections"

urlpatterns = [
    path("callback/", views.connection_callback, name="callback"),
    path("<slug:provider_id>/begin", views.connection_begin, name="begin"),
    path("<slug:provider_id>/token", views.connection_token, name="token"),
    path("<slug:provider_id>/refresh", views.connection_refresh, name="refresh"),
    path("<slug:provider_id>/revoke", views.connection_revoke, name="revoke"),
]
