from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "webapp.workspaces"
    label = "workspaces"

    def ready(self) -> None:
        from webapp.queries.sections import query_page_section_add
        from webapp.reliability.reaper import reaper_add
        from webapp.runs.jobs import job_source_add
        from webapp.workspaces.db_runs import db_job
        from webapp.workspaces.reaper import changes_reap, fs_pending_expire
        from webapp.workspaces.runs import fs_job, rest_job
        from webapp.workspaces.selectors import query_page_workspace

        query_page_section_add(query_page_workspace)
        reaper_add("orphaned change(s)", changes_reap)
        reaper_add("fs change(s) past the pending timeout", fs_pending_expire)
        job_source_add("fs", fs_job)
        job_source_add("db", db_job)
        job_source_add("rest", rest_job)
