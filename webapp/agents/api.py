from ninja import NinjaAPI

api = NinjaAPI(title="Undoable API", version="1", urls_namespace="api")
