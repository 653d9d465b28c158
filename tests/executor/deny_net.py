"""Deny cases: the network (limits.network == "none" means none at all, host included).

No test here needs real traffic: an outside address is judged by the route lookup (a UDP
connect sends nothing) and a non-blocking TCP connect, and the host is judged by listeners
the test opens itself, whose accept queue must stay empty.
"""

from __future__ import annotations

from hostile_bait import Bait
from hostile_kit import DenyCase, no_report, report

from executor.limits import Limits
from executor.result import RunResult

CONNECT = """
import errno, json, os, socket
def connect(address, timeout=1.0):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(address)
        return "connected"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    finally:
        sock.close()
"""


def _check_outside(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    problems = []
    if facts["udp_route"] == "routed":
        problems.append("there is a route to 1.1.1.1")
    if facts["tcp_connect"] in ("0", "EINPROGRESS", "EALREADY", "EISCONN"):
        problems.append(f"a TCP connection to 1.1.1.1 got under way ({facts['tcp_connect']})")
    others = [name for name in facts["interfaces"] if name != "lo"]
    if others:
        problems.append(f"network interfaces besides loopback: {others}")
    return problems


OUTSIDE_IP = DenyCase(
    name="connecting_to_an_outside_ip",
    program="""
import errno, json, socket
facts = {}
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    udp.connect(("1.1.1.1", 53))  # only a route lookup: no packet is sent
    facts["udp_route"] = "routed"
except OSError as exc:
    facts["udp_route"] = errno.errorcode.get(exc.errno, str(exc))
tcp = socket.socket()
tcp.setblocking(False)
facts["tcp_connect"] = errno.errorcode.get(tcp.connect_ex(("1.1.1.1", 53)), "0")
tcp.close()
facts["interfaces"] = [name for _, name in socket.if_nameindex()]
print(json.dumps(facts))
""",
    check=_check_outside,
)


def _check_host_listeners(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    problems = []
    connected = sorted(target for target, outcome in facts.items() if outcome == "connected")
    if connected:
        problems.append(f"the program connected to {connected}")
    reached = bait.tcp_connections()
    if reached:
        problems.append(f"the host's listeners accepted connections: {reached}")
    return problems


HOST_LOOPBACK = DenyCase(
    name="connecting_to_a_server_on_the_hosts_loopback",
    program=CONNECT
    + """
port = int(os.environ["BAIT_TCP_PORT"])
print(json.dumps({f"127.0.0.1:{port}": connect(("127.0.0.1", port))}))
""",
    check=_check_host_listeners,
)

HOST_ADDRESSES = DenyCase(
    name="connecting_to_the_host_on_its_own_addresses",
    program=CONNECT
    + """
facts = {}
for target in os.environ["BAIT_HOST_ADDRS"].split(","):
    host, port = target.rsplit(":", 1)
    facts[target] = connect((host, int(port)))
print(json.dumps(facts))
""",
    check=_check_host_listeners,
)


def _check_dns(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    problems = []
    if facts["getaddrinfo"] == "resolved":
        problems.append("pypi.org resolved")
    datagrams = bait.udp_datagrams()
    if datagrams:
        problems.append(f"the host's UDP port on 127.0.0.1 received {datagrams} DNS queries")
    return problems


DNS = DenyCase(
    name="dns",
    program="""
import json, os, socket
facts = {}
try:
    socket.getaddrinfo("pypi.org", 443)
    facts["getaddrinfo"] = "resolved"
except OSError as exc:
    facts["getaddrinfo"] = str(exc)
# A DNS query for pypi.org, aimed at a resolver the test runs on the host's loopback.
query = bytes.fromhex("abcd01000001000000000000") + b"\\x04pypi\\x03org\\x00\\x00\\x01\\x00\\x01"
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    udp.sendto(query, ("127.0.0.1", int(os.environ["BAIT_UDP_PORT"])))
    facts["query"] = "sent"
except OSError as exc:
    facts["query"] = exc.strerror
print(json.dumps(facts))
""",
    check=_check_dns,
)

CASES = [OUTSIDE_IP, HOST_LOOPBACK, HOST_ADDRESSES, DNS]
