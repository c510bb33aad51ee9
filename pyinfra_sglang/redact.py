"""Secrets out of text that is shown: a host's journal, a command's output.

Pure: text and the secret values the caller knows in; out the same text with each of those
values, and whatever is written the way credentials are written, replaced by the mask.

What is found without knowing the value:

- a credential-named key with a quoted value, in every form SGLang and Python print it:
  ``api_key='...'`` (``server_args=ServerArgs(...)``, a dataclass repr), ``'api_key': '...'``
  (the dict form of newer releases), ``"hf_token": "..."`` (JSON), ``api-key: "..."`` (YAML);
  the names: anything ending in ``api_key``/``api-key``/``apikey``, ``token``, ``secret``,
  ``password``, ``passwd`` (``admin_api_key``, ``hf_token``, ``HF_TOKEN``...);
- the same keys with a bare value: ``HF_TOKEN=hf_...``, ``api_key=sk-...``, ``api-key: x``;
- a flag with its value: ``--api-key sk-...``, ``--api-key=sk-...``, ``--hf-token x``;
- HTTP credentials: ``Authorization: Bearer ...`` (``Basic``, a bare value), ``Bearer ...``
  anywhere;
- Hugging Face tokens by their shape (``hf_`` and 30 or more letters and digits);
- URL logins: ``https://user:password@host`` keeps the user and masks the password;
  ``https://token@host`` (a token in the user's place) masks the token (``ssh://git@``
  keeps its login name).

``None``, ``null`` and empty values stay as they are: they show that no secret was set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from pyinfra_sglang import data


def mask_text() -> str:
    return data.sglang_service().secrets.mask


# A key whose value is a credential: the name ends in one of these words.
_KEY = r"[A-Za-z0-9_]*?(?:api[_-]?key|token|secret|password|passwd)"
_QUOTED = re.compile(
    rf"""(?ix)
    (\b{_KEY}\b ['"]? \s* [:=] \s*)     # the key, its closing quote (dict form), : or =
    (['"])                              # the value's opening quote
    ((?:\\.|(?!\2)[^\\\n])+)            # the value (escapes allowed), not empty
    \2
    """
)
_BARE = re.compile(
    rf"""(?ix)
    (\b{_KEY}\b \s* (?:=|:[ \t]+) [ \t]*)
    (?!(?:none|null|~)\b)               # a value that says "not set" is no secret
    ([^\s'",;)}}\]]+)
    """
)
_FLAG = re.compile(
    r"(?i)(--[A-Za-z0-9-]*?(?:api-key|token|secret|password|passwd)(?:=|[ \t]+))"
    r"(?!--)(['\"]?)([^\s'\"]+)\2"
)
_AUTHORIZATION = re.compile(
    r"""(?i)(\bauthorization['"]?\s*[:=]\s*['"]?(?:(?:bearer|basic|token)[ \t]+)?)([^\s'",]+)"""
)
_BEARER = re.compile(r"(?i)(\bbearer[ \t]+)([A-Za-z0-9._~+/=:-]+)")
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
# scheme://user[:password]@ : the userinfo of RFC 3986 (no '/', '@' or whitespace in it).
_URL_LOGIN = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)([^/@\s:'\"]*)(?::([^/@\s'\"]*))?@")


def _url_login(match: re.Match, mask: str) -> str:
    scheme, user, password = match[1], match[2], match[3]
    if password is not None:
        return f"{scheme}{user}:{mask if password else ''}@"
    # A lone user is a token over HTTP (https://TOKEN@host), a login name elsewhere (ssh://git@).
    token = user and scheme.lower().startswith("http")
    return f"{scheme}{mask if token else user}@"


def _spellings(secret: str) -> set[str]:
    """How a value may be written: as is, in a Python repr, in JSON."""
    return {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]}


def redact(text: str, secrets: Iterable[str | None] = (), mask: str | None = None) -> str:
    """``text`` with every known secret value, and every credential found by its form,
    replaced by ``mask`` (default: the project's, ``********``)."""
    mask = mask_text() if mask is None else mask
    known = {
        spelling
        for secret in secrets
        if secret and secret.strip()
        for spelling in _spellings(secret.strip())
    }
    # Longest first: a secret that contains another is replaced whole.
    for value in sorted(known, key=len, reverse=True):
        text = text.replace(value, mask)
    text = _QUOTED.sub(lambda m: f"{m[1]}{m[2]}{mask}{m[2]}", text)
    text = _FLAG.sub(lambda m: f"{m[1]}{m[2]}{mask}{m[2]}", text)
    text = _BARE.sub(lambda m: m[1] + (m[2] if m[2] == mask else mask), text)
    text = _AUTHORIZATION.sub(lambda m: m[1] + mask, text)
    text = _BEARER.sub(lambda m: m[1] + mask, text)
    text = _URL_LOGIN.sub(lambda m: _url_login(m, mask), text)
    return _HF_TOKEN.sub(mask, text)
