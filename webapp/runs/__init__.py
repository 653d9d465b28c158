"""Runs of a query's code: the Run models, starting and stopping them (services), the worker
side (execution, the thread runner and the Celery task behind run_backends), live output
(sink, publish, the run websocket's consumer and payloads), the run calls of the query page,
and the reaper that ends runs nobody executes any more."""
