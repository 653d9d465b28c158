"""Which links a Keep must refuse: those that would point outside the workspace afterwards.

A link is judged in the workspace as it will be after the apply, links already there included,
because links combine: `a -> b/b/x/../../..` is harmless while `b` does not exist, and escapes
to the host's `/` once a later run adds `b -> .`. So every link of the final tree is resolved
(component by component, following links, like the kernel). An escaping link the run made is
refused; when a link already there escapes, the run's links on its way are refused; and so on
until no link of the final tree escapes by this change's doing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Entry(Protocol):
    """What a link check reads of a tree entry (fs_tree.Entry, which imports this module)."""

    @property
    def kind(self) -> str: ...

    @property
    def target(self) -> str: ...


MAX_HOPS = 40  # the kernel's own limit: past it the path gives ELOOP and reaches nothing


def escaping_links(
    before: Mapping[str, Entry], after: Mapping[str, Entry], refused: Mapping[str, str]
) -> dict[str, str]:
    """The changed links to refuse (path -> reason), given the changes already `refused`.

    `before` is the workspace now, `after` the run's copy; a refused path keeps its `before`
    entry (or stays absent). A link that already escaped before the run is not the run's doing
    and refuses nothing.
    """
    refusing = dict(refused)
    new: dict[str, str] = {}
    while True:
        final = dict(after)
        for rel in refusing:
            if rel in before:
                final[rel] = before[rel]
            else:
                final.pop(rel, None)
        found: dict[str, str] = {}
        for rel, entry in final.items():
            if entry.kind != "symlink":
                continue
            escaped, via = resolve(final, rel)
            if not escaped:
                continue
            if rel not in refusing and _changed_link(before, after, rel):
                found[rel] = "the link points outside the workspace"
                continue
            # A link already in the workspace: the changed links on its way make it escape.
            for hop in via:
                if hop not in refusing and _changed_link(before, after, hop):
                    found.setdefault(
                        hop, f"with it, the link {rel!r} would point outside the workspace"
                    )
        if not found:
            return new
        new.update(found)
        refusing.update(found)


def _changed_link(before: Mapping[str, Entry], after: Mapping[str, Entry], rel: str) -> bool:
    entry = after.get(rel)
    return entry is not None and entry.kind == "symlink" and before.get(rel) != entry


def resolve(tree: Mapping[str, Entry], rel: str) -> tuple[bool, list[str]]:
    """Whether the link at `rel` in `tree` leads above the tree's root, and the links it
    passes through (itself first). Absolute targets escape by definition."""
    via = [rel]
    stack = rel.split("/")[:-1]
    target = tree[rel].target
    if target.startswith("/"):
        return True, via
    pending = list(reversed(target.split("/")))
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return True, via
            stack.pop()
            continue
        candidate = "/".join([*stack, part])
        entry = tree.get(candidate)
        if entry is not None and entry.kind == "symlink":
            hops += 1
            if hops > MAX_HOPS:
                return False, via
            via.append(candidate)
            if entry.target.startswith("/"):
                return True, via
            pending.extend(reversed(entry.target.split("/")))
            continue
        stack.append(part)
    return False, via
