from django.urls import path

from webapp.accounts import views

app_name = "accounts"

urlpatterns = [
    path("", views.account_view, name="account"),
    path("login/", views.login_view, name="login"),
    path("logout/", views.logout_view, name="logout"),
    path("signup/", views.signup_view, name="signup"),
]
