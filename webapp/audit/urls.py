from django.urls import path

from webapp.audit import views

app_name = "audit"

urlpatterns = [
    path("", views.audit_list_view, name="list"),
    path("all/", views.audit_all_view, name="all"),
]
