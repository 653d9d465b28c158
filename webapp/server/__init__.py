"""The server plumbing: the HTTP server (serve: uvicorn with its limits, draining on SIGTERM),
the ASGI layers in front of Django (request_bodies, refused_early), the agent API's own ASGI
handler (api_asgi, asgi_handler) and the exec endpoint's view served straight from ASGI
(direct_view). webapp.asgi assembles them into the one ASGI application."""
