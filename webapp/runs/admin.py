from django.contrib import admin

from webapp.runs.models import Run


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "query", "direction", "status", "exit_code", "created_at")
    list_filter = ("status", "direction")
    raw_id_fields = ("query",)
    # Output is shown on the query page; the admin never needs to page through chunks.
    readonly_fields = ("code", "status", "exit_code", "error", "started_at", "finished_at")
