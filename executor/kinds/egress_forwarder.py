"""In-sandbox forwarder: 127.0.0.1:PORT -> /run/undoable/egress.sock (stdlib only).

It holds no privilege and makes no decision: the host-side proxy behind the socket checks
every destination. It listens, then forks into the background and returns, so the caller knows
the port is open when this command ends (no polling). The sandbox's end takes it down.

One thread serves every connection (relay.py's Tunnel, copied beside this file): threads would
count against the sandbox's process limit, one per connection and direction.
"""

import os
import selectors
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's dir out
from relay import READ, Tunnel  # noqa: E402

SOCK = "/run/undoable/egress.sock"


def accept(sel, server):
    try:
        client, _ = server.accept()
    except OSError:
        return
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(SOCK)
    except OSError:
        client.close()
        upstream.close()
        return
    Tunnel(sel, client, upstream)  # registers both sockets, with itself as their data


def serve(server):
    sel = selectors.DefaultSelector()
    sel.register(server, READ, None)
    while True:
        for key, mask in sel.select():
            if key.data is None:
                accept(sel, server)
                continue
            if key.data.done:
                continue  # closed earlier in this batch
            key.data.handle(key.fileobj, mask)
            if key.data.done:
                key.data.close()


def main():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", int(sys.argv[1])))
    server.listen(1024)
    if os.fork() > 0:
        os._exit(0)
    # Keep none of the program's output pipes open: their EOF must mean the program ended.
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    serve(server)


main()
