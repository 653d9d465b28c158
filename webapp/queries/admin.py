from django.contrib import admin

from webapp.queries.models import Query


@admin.register(Query)
class QueryAdmin(admin.ModelAdmin):
    list_display = ("id", "owner", "kind", "prompt", "created_at")
    list_filter = ("kind",)
    search_fields = ("prompt",)
    raw_id_fields = ("owner",)
