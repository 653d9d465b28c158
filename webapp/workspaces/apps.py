from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "webapp.workspaces"
    label = "workspaces"

    def ready(self) -> None:
        from webapp.queries.sections import query_page_section_add
        from webapp.reliability.reaper import reaper_add
        from webapp.workspaces.reaper import changes_reap
        from webapp.workspaces.selectors import query_page_workspace

        query_page_section_add(query_page_workspace)
        reaper_add("orphaned change(s)", changes_reap)
