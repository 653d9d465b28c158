from django.apps import AppConfig


class ActionsConfig(AppConfig):
    name = "webapp.actions"
    label = "actions"

    def ready(self) -> None:
        from webapp.actions.expiry import rest_actions_expire
        from webapp.actions.selectors import rest_actions_waiting
        from webapp.actions.services import (
            actions_end_for_revoked_token,
            rest_action_waiting_started,
        )
        from webapp.agents.tokens import token_revoked
        from webapp.reliability.reaper import reaper_add
        from webapp.runs.ended import run_end_listener_add
        from webapp.workspaces.waiting import waiting_source_add

        token_revoked.connect(actions_end_for_revoked_token, dispatch_uid="actions-revoked")
        waiting_source_add(rest_actions_waiting)
        run_end_listener_add(rest_action_waiting_started)
        reaper_add("rest action(s) past the pending timeout", rest_actions_expire)
