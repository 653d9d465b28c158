"""Deny cases: the host's files, devices and sockets, and writing outside the workdir."""

from __future__ import annotations

from hostile_bait import Bait
from hostile_kit import DenyCase, no_report, report

from executor.limits import Limits
from executor.result import RunResult


def _check_shadow(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    problems = []
    if (facts["dev"], facts["ino"]) == bait.shadow_id:
        problems.append("/etc/shadow in the sandbox is the host's own file")
    if facts["bytes"]:
        problems.append(f"/etc/shadow is readable and holds {facts['bytes']} bytes")
    return problems


SHADOW = DenyCase(
    name="reading_etc_shadow",
    program="""
import json, os
facts = {"dev": None, "ino": None, "bytes": 0}
try:
    st = os.stat("/etc/shadow")
    facts.update(dev=st.st_dev, ino=st.st_ino)
    with open("/etc/shadow", "rb") as f:
        facts["bytes"] = len(f.read())
except OSError as exc:
    facts["error"] = exc.strerror
print(json.dumps(facts))
""",
    check=_check_shadow,
)


def _check_canary(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    problems = []
    if facts["exists"]:
        problems.append("the host's canary file is visible in the sandbox")
    if bait.canary_text in result.stdout:
        problems.append("the host's canary file was read")
    return problems


def _read_canary(variable: str) -> str:
    return f"""
import json, os
path = os.environ["{variable}"]
facts = {{"exists": os.path.lexists(path), "content": ""}}
try:
    with open(path) as f:
        facts["content"] = f.read()
except OSError as exc:
    facts["error"] = exc.strerror
print(json.dumps(facts))
"""


CANARY_REPO = DenyCase(
    name="reading_a_canary_file_in_the_project_checkout",
    program=_read_canary("BAIT_REPO_CANARY"),
    check=_check_canary,
)
CANARY_TMP = DenyCase(
    name="reading_a_canary_file_in_the_hosts_tmp",
    program=_read_canary("BAIT_TMP_CANARY"),
    check=_check_canary,
)


def _check_host_paths(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    visible = sorted(path for path, exists in facts.items() if exists)
    return [f"host-only paths are visible: {visible}"] if visible else []


HOST_PATHS = DenyCase(
    name="seeing_the_checkout_work_root_and_docker_socket",
    program="""
import json, os
paths = os.environ["BAIT_HOST_ONLY_PATHS"].split(":")
print(json.dumps({path: os.path.lexists(path) for path in paths}))
""",
    check=_check_host_paths,
)


def _check_escape(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    problems = []
    written = [d for d in ("/", "/usr", "/etc") if facts[d] == "written"]
    if written:
        problems.append(f"the program could write into {written}")
    escaped = bait.escaped_files()
    if escaped:
        problems.append(f"files the program wrote appeared on the host: {escaped}")
    return problems


WRITE_OUTSIDE = DenyCase(
    name="writing_outside_the_workdir",
    program="""
import json, os
name = "undoable-escape-" + os.environ["BAIT_MARKER"]
facts = {}
# /tmp, /var/tmp and /dev/shm may be private scratch space; the host must never see them.
for directory in ("/", "/usr", "/etc", "/var/tmp", "/dev/shm", "/tmp", "/workspace/.."):
    try:
        with open(os.path.join(directory, name), "w") as f:
            f.write("escaped")
        facts[directory] = "written"
    except OSError as exc:
        facts[directory] = exc.strerror
print(json.dumps(facts))
""",
    check=_check_escape,
)


def _check_devices(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    opened = sorted(dev for dev, outcome in facts.items() if outcome == "opened")
    return [f"raw devices could be opened: {opened}"] if opened else []


RAW_DEVICES = DenyCase(
    name="opening_raw_devices",
    program="""
import json, os
devices = ["/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/mem", "/dev/kmem", "/dev/port",
           "/dev/kmsg", "/dev/fuse", "/dev/kvm", "/dev/vsock", "/dev/loop-control",
           "/dev/loop0", "/dev/userfaultfd", "/dev/zram0", "/dev/btrfs-control"]
facts = {}
for dev in devices:
    try:
        os.close(os.open(dev, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
        facts[dev] = "opened"
    except OSError as exc:
        facts[dev] = exc.strerror
print(json.dumps(facts))
""",
    check=_check_devices,
    # A machine with dmesg_restrict and no /dev/mem leaves an unprivileged user nothing to
    # open; root (what a sandbox escape would be) opens them, so the proof runs as root.
    sabotage_as_root=True,
)

CASES = [SHADOW, CANARY_REPO, CANARY_TMP, HOST_PATHS, WRITE_OUTSIDE, RAW_DEVICES]
