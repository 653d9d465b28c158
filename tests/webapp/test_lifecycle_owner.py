"""Only webapp.lifecycle writes a lifecycle status: every other module of the web app is read
with Python's own parser and any write of a `status` field is named (file and line).

What counts as a write: `.update(status=...)` and `.update(**{"status": ...})`, any assignment
to `<object>.status` (an exception's own `self.status`, an HTTP code, is not a row), a
`create`/`get_or_create`/`update_or_create`/`bulk_create` given a status other than a row's
initial one, `bulk_update(..., ["status", ...])`, `save(update_fields=[... "status" ...])` and
`setattr(<object>, "status", ...)`. Migrations are left out: they are history, run once.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

from webapp import lifecycle

WEBAPP = Path(lifecycle.__file__).parent
OWNER = Path(lifecycle.__file__)
CREATORS = {"create", "get_or_create", "update_or_create", "bulk_create"}
# The state a row is created in may be named at creation: that is no move.
INITIAL = {machine.initial for machine in lifecycle.MACHINES}


def _names_status(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == "status"


def _lists_status(node: ast.expr) -> bool:
    return isinstance(node, (ast.List, ast.Tuple, ast.Set)) and any(
        _names_status(element) for element in node.elts
    )


def _is_initial(value: ast.expr) -> bool:
    """`"queued"`, or `RunStatus.QUEUED` (the member's lower-cased name is its value)."""
    if isinstance(value, ast.Constant):
        return value.value in INITIAL
    return isinstance(value, ast.Attribute) and value.attr.lower() in INITIAL


def _status_targets(target: ast.expr) -> Iterable[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _status_targets(element)
    elif (
        isinstance(target, ast.Attribute)
        and target.attr == "status"
        and not (isinstance(target.value, ast.Name) and target.value.id == "self")
    ):
        yield target


def _call_writes(call: ast.Call) -> str | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    keywords = {k.arg: k.value for k in call.keywords}
    if name == "setattr" and len(call.args) >= 2 and _names_status(call.args[1]):
        return "setattr(..., 'status', ...)"
    if not isinstance(func, ast.Attribute):
        return None
    if name == "update":
        if "status" in keywords:
            return ".update(status=...)"
        spread = [k.value for k in call.keywords if k.arg is None]
        if any(
            isinstance(d, ast.Dict) and any(_names_status(k) for k in d.keys if k) for d in spread
        ):
            return ".update(**{'status': ...})"
    if name in CREATORS and "status" in keywords and not _is_initial(keywords["status"]):
        return f".{name}(status=...) in a state other than the initial one"
    if name in CREATORS and "defaults" in keywords:
        defaults = keywords["defaults"]
        if isinstance(defaults, ast.Dict) and any(_names_status(k) for k in defaults.keys if k):
            return f".{name}(defaults={{'status': ...}})"
    if name == "bulk_update" and any(
        _lists_status(a) for a in [*call.args[1:], *keywords.values()]
    ):
        return ".bulk_update(..., ['status'])"
    if name == "save" and "update_fields" in keywords and _lists_status(keywords["update_fields"]):
        return ".save(update_fields=['status', ...])"
    return None


def status_writes(source: str) -> list[tuple[int, str]]:
    """(line, what) for each write of a status field in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for hit in _status_targets(target):
                    found.append((hit.lineno, "assignment to .status"))
        elif isinstance(node, ast.Call) and (what := _call_writes(node)):
            found.append((node.lineno, what))
    return sorted(found)


def writers_outside_the_owner(files: Iterable[Path]) -> list[str]:
    return [
        f"{path}:{line}: {what}"
        for path in files
        if path != OWNER and "migrations" not in path.parts
        for line, what in status_writes(path.read_text())
    ]


def webapp_sources() -> list[Path]:
    return sorted(WEBAPP.rglob("*.py"))


def test_only_the_lifecycle_module_writes_a_status():
    assert writers_outside_the_owner(webapp_sources()) == []


def test_the_lifecycle_module_is_where_the_writes_are():
    # The checker sees the owner's own write: it is looking at the right thing.
    assert status_writes(OWNER.read_text())


def test_the_tables_name_only_the_models_own_states():
    from django.apps import apps

    for machine in lifecycle.MACHINES:
        field = apps.get_model(machine.model)._meta.get_field("status")
        states = {value for value, _ in field.choices}
        named = set(machine.moves) | {s for sources in machine.moves.values() for s in sources}
        assert named <= states, machine.model
        assert machine.initial == field.default, machine.model


def test_deny_a_move_the_table_does_not_allow():
    with pytest.raises(ValueError, match="may not come from"):
        lifecycle.run_move(1, "succeeded", from_=["queued"])
    with pytest.raises(ValueError, match="nothing moves to"):
        lifecycle.change_move(1, "running")


OUTSIDE_WRITES = """
Run.objects.filter(pk=1).update(status="failed")
Run.objects.filter(pk=1).update(**{"status": "failed", "error": ""})
run.status = RunStatus.FAILED
change.status, change.message = ChangeStatus.KEPT, ""
PendingChange.objects.create(run=run, kind="fs", status=ChangeStatus.KEPT)
PendingChange.objects.update_or_create(run=run, defaults={"status": "kept"})
Run.objects.bulk_update(runs, ["status"])
run.save(update_fields=["status", "error"])
setattr(run, "status", "failed")
"""

NOT_WRITES = """
self.status = status
PendingChange.objects.create(run=run, kind="fs")
PendingChange.objects.create(run=run, kind="fs", status=ChangeStatus.RUNNING)
Run.objects.create(query=query, status=RunStatus.QUEUED)
JsonResponse({"error": message}, status=409)
Run.objects.filter(status=RunStatus.QUEUED).update(heartbeat_at=now)
"""


def test_sabotage_a_status_written_outside_the_lifecycle_module_is_found(tmp_path):
    outside = tmp_path / "services.py"
    outside.write_text(OUTSIDE_WRITES)
    found = writers_outside_the_owner([*webapp_sources(), outside])
    assert [entry.split(":")[1] for entry in found] == [str(n) for n in range(2, 11)]


def test_the_checker_leaves_alone_what_writes_no_status():
    assert status_writes(NOT_WRITES) == []
