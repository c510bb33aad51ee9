"""Secrets in host data, found and masked before a problem shows a value: the user and
password of any URL, the value of a credential flag or of a credential-named key."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import HttpUrl

from pyinfra_sglang.serving.extra_args import SECRET_SERVER_FLAGS, managed_flag_in

# A URL's user and password (``https://user:pass@host``): never shown, whatever the field.
_URL_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)([^/?#@\s'\"]+)@")
# Names of credentials, as redact.py knows them: a flag (``--api-key``) or a key
# (``HF_TOKEN``, ``my_password``) whose value is a secret.
_CREDENTIAL = r"(?:api[_-]?key|token|secret|password|passwd)"
_SECRET_FLAG = re.compile(rf"(?i)^--[A-Za-z0-9-]*?{_CREDENTIAL}$")
_SECRET_KEY = re.compile(rf"(?i)^[A-Za-z0-9_-]*?{_CREDENTIAL}$")


def _secret_flag(arg: str) -> bool:

    name = arg.split("=", 1)[0]
    return bool(_SECRET_FLAG.match(name)) or managed_flag_in(name) in SECRET_SERVER_FLAGS


def _url_secrets(text: str) -> list[str]:
    from urllib.parse import unquote, urlsplit

    try:
        userinfo = urlsplit(text.strip()).netloc.rpartition("@")[0]
    except ValueError:
        return []
    parts = (userinfo, *userinfo.split(":", 1))
    return [form for part in parts if part for form in (part, unquote(part))]


def secrets_in(value: Any) -> list[str]:
    """Secret values inside host data: the user and password of any URL, the value of any
    credential flag in a list of arguments (``["--api-key", "sk-..."]``, ``--api-key=sk-...``)
    and of any credential-named key (``{"HF_TOKEN": "hf_..."}``)."""
    found: list[str] = []
    if isinstance(value, (HttpUrl, Path)):
        value = str(value)
    if isinstance(value, str):
        if "://" in value and "@" in value:
            found += _url_secrets(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and isinstance(item, str) and _SECRET_KEY.match(key):
                found.append(item)
            found += secrets_in(item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found += secrets_in(item)
            if not isinstance(item, str) or not _secret_flag(item):
                continue
            if "=" in item:
                found.append(item.split("=", 1)[1])
            elif index + 1 < len(value) and isinstance(value[index + 1], str):
                found.append(value[index + 1])
    return [secret.strip() for secret in found if secret and secret.strip()]


def mask_secrets(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """``text`` as a problem may show it: each of ``secrets`` (as written, in a repr, in JSON)
    where it stands as a word of its own, and every URL's user and password, replaced by
    the mask."""
    import json

    from pyinfra_sglang.redact import mask_text

    mask = mask_text()
    spellings = {form for secret in secrets for form in (secret, repr(secret)[1:-1])}
    spellings |= {json.dumps(secret)[1:-1] for secret in secrets}
    # Longest first: a secret that contains another is replaced whole. Not inside a longer
    # word: a secret "x" leaves "extra_args" alone.
    for spelling in sorted(spellings, key=len, reverse=True):
        pattern = rf"(?<![A-Za-z0-9_]){re.escape(spelling)}(?![A-Za-z0-9_])"
        text = re.sub(pattern, lambda _: mask, text)
    return _URL_USERINFO.sub(lambda m: f"{m[1]}{mask}@", text)
