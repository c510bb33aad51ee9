"""A mirror URL's login (``https://user:password@mirror/...``): split off the URL, and what
apt's auth.conf and curl's netrc can hold. Validation and the NVIDIA repository role both
judge it here, so validate refuses what the deploy would."""

from __future__ import annotations

import urllib.parse


def split_login(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its user and password, and those (percent-decoded, as apt and curl
    use them), or None when it has none."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    plain = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    return plain, (urllib.parse.unquote(user), urllib.parse.unquote(password))


def login_problem(login: tuple[str, str]) -> str | None:
    """Why apt's and curl's netrc files cannot hold ``login`` (never showing it); None when
    they can. A user without a password is refused too: apt would send none."""
    if any(
        not word
        or word.startswith("#")  # curl's netrc reads a token starting with '#' as a comment
        or any(c.isspace() or not c.isprintable() or c == '"' for c in word)
        for word in login
    ):
        return (
            "the user or password is empty, starts with '#' or holds a space, a quote or a "
            "control character, which apt's auth.conf cannot hold (nor curl's netrc); allowed: "
            'a user and a password of printable characters other than space and ", not '
            "starting with #"
        )
    return None
