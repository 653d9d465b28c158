"""webapp.asgi's application with POST /api/v1/exec served by Django's handler and its ninja
operation rather than straight from ASGI: what `BENCH_EXEC_VIA=ninja python
tests/bench/bench_api.py` serves, to compare the two (docs/architecture.md, "Why exec skips
ninja"), and what tests/webapp/agents/test_exec_paths.py holds to the same answers."""

from channels.routing import ProtocolTypeRouter

from webapp.asgi import application as deployed
from webapp.asgi import http_application

application = ProtocolTypeRouter(
    {**deployed.application_mapping, "http": http_application(exec_direct=False)}
)
