"""Where the model's Hub cache may be (``sglang_model_cache_dir``).

The service user owns that folder and runs model code in it (``trust_remote_code``), so a
value such as ``/etc`` or ``/usr/lib`` would hand a system tree to it. Two checks, both
before any change:

- ``path_problem``, in the inventory: a clean absolute path (no ``.``, ``..`` or empty
  component), not a shared parent itself (``/srv``, ``/opt``...), not in a system tree
  (``/etc``, ``/usr``, ``/var``...) except under a dedicated root of this project's
  (``/var/lib/sglang``); data/model.toml [cache_dir];
- ``host_problem``, on the host (checks.facts.CacheDirState): no component is a symlink, no
  package owns the folder, and an existing folder is the service user's or empty (the role
  then takes it, that folder alone). A tree with another owner's files is refused with the
  command that gives it to the user: the role never re-owns a tree recursively.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pyinfra_sglang import data


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot hold the Hub cache, by its text alone; None when it can."""
    rules = data.model().cache_dir
    parts = path.split("/")[1:]
    if not path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        return f"{path} is not a clean absolute path (no '.', '..', '//' or trailing '/')"
    if path in rules.shared_parents:
        example = f"{path.rstrip('/')}/sglang-hub"
        return f"{path} is a shared folder: name a folder of its own below it (e.g. {example})"
    if any(_under(path, root) and path != root for root in rules.dedicated_roots):
        return None
    trees = [tree for tree in rules.system_trees if _under(path, tree)]
    if trees:
        roots = ", ".join(f"below {root}" for root in rules.dedicated_roots)
        where = "is" if path == trees[0] else f"is in {trees[0]},"
        return (
            f"{path} {where} a system tree the service user must not own "
            f"(allowed: {roots}, or a folder of its own on another filesystem such as "
            "/srv/sglang-hub)"
        )
    return None


@dataclass(frozen=True)
class CacheDirState:
    """What the host has at the cache's path (checks.facts.CacheDirState)."""

    path: str
    deepest: str  # the path, or its deepest ancestor that exists
    resolved: str  # that one with every symlink resolved (readlink -f)
    owner: str | None  # the folder's owner when it exists
    kind: str | None  # stat's %F: "directory", "symbolic link", "regular file"...
    empty: bool
    foreign: str | None  # the first path below it not owned by the service user
    package: str | None  # dpkg's owner of the path, if any


def parse_state(lines: Iterable[str]) -> CacheDirState:
    """The fact's ``key=value`` lines (checks.facts.CacheDirState)."""
    values: dict[str, str] = {}
    keys = {"path", "deepest", "resolved", "owner", "kind", "empty", "foreign", "package"}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep and key in keys:
            values.setdefault(key, value)
    path = values.get("path", "")
    deepest = values.get("deepest") or path
    return CacheDirState(
        path=path,
        deepest=deepest,
        resolved=values.get("resolved") or deepest,
        owner=values.get("owner") or None,
        kind=values.get("kind") or None,
        empty=values.get("empty") == "1",
        foreign=values.get("foreign") or None,
        package=values.get("package") or None,
    )


def host_problem(state: CacheDirState, user: str) -> str | None:
    """Why the host's ``state`` cannot take the cache for ``user``; None when it can."""
    if state.resolved != state.deepest:
        return (
            f"{state.deepest} resolves to {state.resolved}: a symlink in the path would let "
            "the service user's folder land elsewhere; name the real folder"
        )
    if state.package:
        return f"{state.path} belongs to the package {state.package}; name a folder of its own"
    if state.owner is None:
        return None  # made by the role, the user's
    if state.kind != "directory":
        return f"{state.path} exists and is a {state.kind}, not a folder"
    if state.owner == user and state.foreign is None:
        return None
    if state.empty:
        return None  # an empty folder (a mount point): the role takes that folder alone
    holder = state.foreign or state.path
    return (
        f"{state.path} exists and holds files the service user {user} does not own "
        f"({holder}); the deploy does not re-own a tree. If it is the model cache, give it "
        f"to {user} first (chown -R {user}:{user} {state.path}), or name another folder"
    )
