"""A plain-http request through the rest kind's proxy (egress_proxy.py), written anew by the host.

The proxy checks an absolute-form request's target (`GET http://host:port/path`) against the
run's allowlist, so what goes on must say the same thing and nothing else: a program's own
`Host:` header would pick another site on a shared front end (a CDN, a load balancer, virtual
hosts), and a second request on the same connection would never be checked at all. So the
request is read with h11 (no hand-written HTTP parsing) and sent as a new one:

- the request line in origin form, and `Host:` the checked authority, whatever the program sent;
- hop-by-hop headers dropped (RFC 9110 7.6.1: `Connection` and the ones it names,
  `Keep-Alive`, `Proxy-*`, `TE`, `Trailer`, `Upgrade`), and the body framed again by h11:
  chunked when the program sent chunked (it wins over a `Content-Length`, RFC 9112 6.3), else
  the `Content-Length`; never both, so the upstream cannot read the body differently;
- `Connection: close`, and nothing the program sends after the request's body: one checked
  request per connection.

HTTPS goes through CONNECT as a tunnel the proxy cannot read: it checks the CONNECT authority
only; the TLS server name (SNI) and the `Host:` inside are the program's (docs/kinds.md).
"""

from __future__ import annotations

import h11

__all__ = ["ForwardedRequest", "authority", "forwarded_headers"]

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"transfer-encoding",
        b"content-length",
        b"host",
    }
)


def authority(host: str, port: int) -> str:
    """The `Host:` value for a checked destination (the port left out when it is http's 80)."""
    name = f"[{host}]" if ":" in host else host
    return name if port == 80 else f"{name}:{port}"


def forwarded_headers(
    headers: list[tuple[bytes, bytes]], host_header: str
) -> list[tuple[bytes, bytes]]:
    """The program's end-to-end headers after `Host: host_header`, framing and Connection last.

    `headers` are h11's raw items (names as sent, values validated).
    """
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    kept = [(n, v) for n, v in headers if n.lower() not in _HOP_BY_HOP | named]
    lowered = {n.lower(): v for n, v in headers}
    if b"transfer-encoding" in lowered:
        framing = [(b"Transfer-Encoding", b"chunked")]  # h11 accepts no other coding
    elif b"content-length" in lowered:
        framing = [(b"Content-Length", lowered[b"content-length"])]
    else:
        framing = []
    return [(b"Host", host_header.encode("ascii")), *kept, *framing, (b"Connection", b"close")]


class ForwardedRequest:
    """One request read from the program and re-sent: start() gives its new head (and any body
    bytes read along), then calling it on the program's further bytes gives what to send on,
    until the body has ended; after that, nothing (a second request is dropped unread).

    ValueError for anything h11 refuses: a malformed head or body, an incomplete head.
    """

    def __init__(self, head: bytes, *, max_head: int) -> None:
        self._in = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
        self._out = h11.Connection(h11.CLIENT)
        self._in.receive_data(head)
        event = self._next()
        if not isinstance(event, h11.Request):
            raise ValueError("incomplete request head")
        self._request = event
        self.method = event.method.decode("ascii")
        self.target = event.target.decode("ascii")
        self.done = False

    def start(self, *, host: str, port: int, path: str) -> bytes:
        headers = forwarded_headers(self._request.headers.raw_items(), authority(host, port))
        request = h11.Request(method=self._request.method, target=path, headers=headers)
        return self._send(request) + self._pump()

    def __call__(self, chunk: bytes) -> bytes:
        if self.done:
            return b""
        self._in.receive_data(chunk)
        return self._pump()

    def _pump(self) -> bytes:
        out = bytearray()
        while not self.done:
            event = self._next()
            if isinstance(event, h11.Data):
                out += self._send(h11.Data(data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                out += self._send(h11.EndOfMessage())
                self.done = True
            else:  # NEED_DATA
                break
        return bytes(out)

    def _next(self) -> object:
        try:
            return self._in.next_event()
        except h11.ProtocolError as exc:
            raise ValueError(f"malformed request: {exc}") from None

    def _send(self, event: h11.Event) -> bytes:
        try:
            return self._out.send(event) or b""
        except h11.ProtocolError as exc:
            raise ValueError(f"cannot forward the request: {exc}") from None
