from django.apps import AppConfig


class ActionsConfig(AppConfig):
    name = "webapp.actions"
    label = "actions"

    def ready(self) -> None:
        from webapp.actions.services import actions_end_for_revoked_token
        from webapp.agents.tokens import token_revoked

        token_revoked.connect(actions_end_for_revoked_token, dispatch_uid="actions-revoked")
