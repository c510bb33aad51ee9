"""Root and the trees a service user owns (Grafana's /var/lib/grafana, the SGLang user's
model cache): root never writes, moves, chmods or chowns a path there. The user can swap
any part of such a path for a symlink between root's look and root's act, and chown,
chmod, mv and ``>`` all follow it: a root file would become the user's.

Two ways, one for each kind of file:

- a file root installs for a service to read is staged in a root-only folder
  (``root_only_folder``: root:root 0700, which no other user can enter), checked there, and
  installed with ``install -o -g -m`` into a folder root owns (``install_staged``);
- a file that must live in the user's tree is written by that user (``as_user``): a
  symlink planted there then aims the user's own write, with the user's own rights.
"""

from __future__ import annotations

import shlex

q = shlex.quote


def as_user(user: str, command: str) -> str:
    """``command`` run by ``sh`` as ``user`` (runuser: util-linux, no PAM session, no
    password), for what root must do inside a tree ``user`` owns."""
    return f"runuser -u {q(user)} -- sh -c {q(command)}"


def root_only_folder(path: str) -> str:
    """The command that makes ``path`` root:root 0700 (its parents root's, as made by
    ``install -d``), whatever it was: where root stages files nobody else may touch."""
    return f"install -d -m 700 -o root -g root {q(path)}"


def install_staged(staged: str, dest: str, owner: str, group: str, mode: str) -> str:
    """Copy ``staged`` (in a root-only folder) to ``dest`` (in a folder root owns) with its
    owner, group and mode set as it is written, then remove the staged file."""
    return (
        f"install -m {q(mode)} -o {q(owner)} -g {q(group)} {q(staged)} {q(dest)} && "
        f"rm -f {q(staged)}"
    )
