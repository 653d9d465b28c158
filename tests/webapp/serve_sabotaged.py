"""`python -m tests.webapp.serve_sabotaged [webapp.server.serve options]`: the web server as
`python -m webapp.server.serve` starts it, with the protection named by UNDOABLE_TEST_SABOTAGE
switched off, for the sabotage tests that drive the real server:

- `close-at-once`: an answer that ends its connection (`Connection: close`) closes it at once,
  with the request body still coming, as uvicorn does, instead of after the rest of the body
  was read and dropped.
"""

import os

from webapp.server import serve


def close_at_once() -> None:
    serve.BodyFirstTransport.close = lambda self: self._transport.close()  # type: ignore[method-assign]


SABOTAGES = {"close-at-once": close_at_once}

if __name__ == "__main__":
    SABOTAGES[os.environ["UNDOABLE_TEST_SABOTAGE"]]()
    serve.main()
