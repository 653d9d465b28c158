from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "webapp.runs"
    label = "runs"

    def ready(self) -> None:
        from webapp.queries.sections import query_page_section_add
        from webapp.reliability.reaper import reaper_add
        from webapp.runs import checks  # noqa: F401  (registers the system checks)
        from webapp.runs.reaper import runs_reap
        from webapp.runs.views import query_page_runs

        query_page_section_add(query_page_runs)
        reaper_add("run(s)", runs_reap)
