"""In-sandbox forwarder: 127.0.0.1:PORT -> /run/undoable/egress.sock (stdlib only).

It holds no privilege and makes no decision: the host-side proxy behind the socket checks
every destination. It listens, then forks into the background and returns, so the caller knows
the port is open when this command ends (no polling). The sandbox's end takes it down.
"""

import contextlib
import os
import socket
import sys
import threading

SOCK = "/run/undoable/egress.sock"


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def serve(server):
    while True:
        client, _ = server.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(SOCK)
        except OSError:
            client.close()
            continue
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


def main():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", int(sys.argv[1])))
    server.listen(64)
    if os.fork() > 0:
        os._exit(0)
    # Keep none of the program's output pipes open: their EOF must mean the program ended.
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    serve(server)


main()
