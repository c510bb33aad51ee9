"""A model's files on the Hugging Face Hub at one revision, asked of the Hub's HTTP API on
the controller before any host changes: the commit a branch or tag stands for, each file
and its size, and what a host's cache still lacks. Clear errors for a gated or missing
repository, a bad token, a revision that does not exist, an unreachable Hub.

The API is the one the huggingface_hub client uses (``GET /api/models/<repo>/revision/<rev>
?blobs=true``: ``sha`` and ``siblings`` with sizes; errors by ``X-Error-Code``)."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from functools import cache

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang import data

COMMIT = re.compile(r"^[0-9a-f]{40}$")
# A blob id as huggingface_hub names cache blobs: a sha256 (LFS) or a git blob id (sha1).
BLOB_ID = re.compile(r"^(?:[0-9a-f]{64}|[0-9a-f]{40})$")
DEFAULT_ENDPOINT = "https://huggingface.co"
GB = 1e9


class ModelPlanError(PyinfraError):
    """The Hub cannot give this model at this revision (the message says why)."""


@dataclass(frozen=True)
class Snapshot:
    repo: str
    revision: str  # as asked for: a commit, a branch or a tag
    commit: str  # the 40-hex commit it stands for
    files: tuple[tuple[str, int], ...]  # (path, size), sorted by path
    # (path, blob id, LFS?): the name huggingface_hub gives each file's blob (the sha256 of
    # an LFS file, the git blob id of another), as the Hub lists them; () when it did not.
    blobs: tuple[tuple[str, str, bool], ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def missing(self, present: dict[str, int]) -> list[tuple[str, int]]:
        """Files the host lacks, or holds at another size (a cut-off download)."""
        return [(path, size) for path, size in self.files if present.get(path) != size]

    def missing_bytes(self, present: dict[str, int]) -> int:
        return sum(size - min(present.get(path, 0), size) for path, size in self.missing(present))


def is_local_model(model: str) -> bool:
    """A path on the host (served from there, never downloaded)."""
    return model.startswith("/")


def model_revision(inventory_revision: str | None, profile_revision: str | None) -> str:
    """The revision of the Hub model to download and serve: the inventory's
    sglang_model_revision, else the profile's pinned commit, else the main branch."""
    return inventory_revision or profile_revision or "main"


def cache_folder_name(repo: str) -> str:
    """The Hub cache's folder of a model: models--<org>--<name> (huggingface_hub's layout)."""
    return "models--" + repo.replace("/", "--")


def default_hub_cache_dir() -> str:
    """HF_HOME/hub, HF_HOME as the service's env sets it: where the Hub client looks when
    HF_HUB_CACHE is not set."""
    # From the service's data, as render.cache_dirs() reads it: render sits above the
    # profiles, which use this module.
    cache = data.sglang_service().environment.cache
    return f"{cache.root.rstrip('/')}/{cache.dirs['HF_HOME']}/hub"


def hub_cache_dir(configured: str | None = None) -> str:
    """The Hub cache the model goes into and the service reads: ``configured`` (the
    inventory's sglang_model_cache_dir) or the default."""
    return (configured or default_hub_cache_dir()).rstrip("/")


def snapshot_folder(cache_dir: str, repo: str, commit: str) -> str:
    return f"{cache_dir}/{cache_folder_name(repo)}/snapshots/{commit}"


def ref_file(cache_dir: str, repo: str, ref: str) -> str:
    """Where the Hub cache keeps the commit a branch or tag stood for when it was fetched:
    offline, the client resolves a revision that is no commit through it."""
    return f"{cache_dir}/{cache_folder_name(repo)}/refs/{ref}"


def needed_bytes(missing: int) -> int:
    """Free space a download of ``missing`` bytes asks for: data/model.toml's margin on top."""
    margin = data.model().disk_margin
    if missing == 0:
        return 0
    return int(missing * (1 + float(margin.fraction)) + float(margin.min_gb) * GB)


def _error(repo: str, revision: str, error: urllib.error.HTTPError, token: bool) -> str:
    code = error.headers.get("X-Error-Code")
    message = error.headers.get("X-Error-Message") or ""
    asked = f"model {repo} at revision {revision}"
    if code == "RevisionNotFound":
        return f"{asked}: the Hub has no such revision (a commit, branch or tag of {repo})"
    if code == "GatedRepo":
        hint = (
            "the token has no access: accept the model's terms on the Hub"
            if token
            else ("set hf_token_file to a token of an account that accepted the model's terms")
        )
        return f"{asked}: the repository is gated; {hint}"
    if message == "Invalid credentials in Authorization header":
        return f"{asked}: the Hub refuses the token in hf_token_file (invalid or expired)"
    if code == "RepoNotFound" or error.code in (401, 404):
        return f"{asked}: the Hub has no such repository, or it is private and " + (
            "the token cannot see it" if token else "no hf_token_file is set"
        )
    return f"{asked}: the Hub answered {error.code} {message or error.reason}"


def _origin(url: str) -> tuple:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname, parts.port or {"http": 80, "https": 443}.get(parts.scheme)


class _TokenStaysHome(urllib.request.HTTPRedirectHandler):
    """Redirects as urllib follows them, but the token goes only where it was sent: urllib
    copies every header but the body's onto the new request, Authorization too, to any host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_TokenStaysHome)


def _without_login(endpoint: str) -> tuple[str, str | None]:
    """``endpoint`` without its user:password, and those (decoded), or None."""
    parts = urllib.parse.urlsplit(endpoint)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return endpoint, None
    plain = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    return plain, urllib.parse.unquote(userinfo)


def _request(url: str, token: str | None, accept: str | None = None) -> urllib.request.Request:
    """A GET of ``url`` (an endpoint's user:password taken out of it) with the token, or the
    mirror's login as basic auth (one Authorization)."""
    url, login = _without_login(url)
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    elif login:
        request.add_header("Authorization", f"Basic {base64.b64encode(login.encode()).decode()}")
    return request


def _timeout(timeout_s: float | None) -> float:
    return timeout_s if timeout_s is not None else float(data.model().api_timeout_s)


def open_hub_url(url: str, token: str | None, timeout_s: float | None, max_bytes: int) -> bytes:
    """The body of a Hub file (``<endpoint>/<repo>/resolve/<commit>/<path>``), at most
    ``max_bytes`` of it; ModelPlanError saying why not (never the token or a login)."""
    plain, _ = _without_login(url)
    try:
        with _OPENER.open(_request(url, token), timeout=_timeout(timeout_s)) as response:
            return response.read(max_bytes)
    except urllib.error.HTTPError as error:
        raise ModelPlanError(f"{plain}: the Hub answered {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ModelPlanError(f"cannot read {plain} ({reason})") from None


@cache
def hub_snapshot(
    endpoint: str, repo: str, revision: str, token: str | None, timeout_s: float | None = None
) -> Snapshot:
    """The model's files at ``revision`` (asked once per run for all hosts alike), waiting
    up to ``timeout_s`` (data/model.toml's api_timeout_s by default)."""
    # A mirror's user:password: urllib would take it for part of the host name (and the
    # error below would show it). Sent as basic auth, unless a token is (one Authorization).
    url = (
        f"{endpoint.rstrip('/')}/api/models/{repo}/revision/"
        f"{urllib.parse.quote(revision, safe='')}?blobs=true"
    )
    endpoint, _ = _without_login(endpoint)
    try:
        with _OPENER.open(
            _request(url, token, "application/json"), timeout=_timeout(timeout_s)
        ) as response:
            info = json.load(response)
    except urllib.error.HTTPError as error:
        raise ModelPlanError(_error(repo, revision, error, bool(token))) from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ModelPlanError(
            f"model {repo} at revision {revision}: cannot reach the Hub at {endpoint} "
            f"({reason}); set hf_endpoint to a mirror, or serve the model from a local path"
        ) from None
    except json.JSONDecodeError:
        raise ModelPlanError(
            f"model {repo} at revision {revision}: {endpoint} did not answer with the Hub's "
            "JSON (is hf_endpoint a Hugging Face Hub or mirror?)"
        ) from None
    commit = str(info.get("sha") or "")
    if not COMMIT.match(commit):
        raise ModelPlanError(f"model {repo} at revision {revision}: the Hub gave no commit")
    files, blobs = [], []
    for sibling in info.get("siblings") or []:
        size = sibling.get("size")
        lfs = sibling.get("lfs") or {}
        if size is None:
            size = lfs.get("size")
        if not isinstance(size, int):
            raise ModelPlanError(
                f"model {repo} at revision {revision}: the Hub gave no size for "
                f"{sibling.get('rfilename')}"
            )
        files.append((str(sibling["rfilename"]), size))
        blob = lfs.get("sha256") or sibling.get("blobId")
        if isinstance(blob, str) and BLOB_ID.match(blob):
            blobs.append((str(sibling["rfilename"]), blob, bool(lfs.get("sha256"))))
    return Snapshot(
        repo=repo,
        revision=revision,
        commit=commit,
        files=tuple(sorted(files)),
        blobs=tuple(sorted(blobs)) if len(blobs) == len(files) else (),
    )
