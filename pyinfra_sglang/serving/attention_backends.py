"""Which sparse-attention backends can run where (data/attention_backends.toml), and the
checks that keep a profile from giving a GPU architecture a backend its kernels reject.

Checked before anything is rendered: a profile resolved for the GPUs found
(``Profile.for_arch``) must name sparse-attention backends whose kernels run on that
architecture, in the pinned SGLang release, with a KV cache dtype they take; and the release
must be one the profile's table for that architecture allows. The refusal names the
profile's fallback (e.g. the dense GLM-5 profile) when it has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pyinfra_sglang import data
from pyinfra_sglang.arch import Arch, as_sm
from pyinfra_sglang.serving.profiles import Profile
from pyinfra_sglang.serving.sglang_flags import FlagVersionError
from pyinfra_sglang.versions import parse_version

SPARSE_FIELDS = ("sparse_attention_prefill_backend", "sparse_attention_decode_backend")


@dataclass(frozen=True)
class BackendSupport:
    name: str
    archs: tuple[str, ...]
    since: str | None
    kv_cache_dtypes: tuple[str, ...] | None
    source: str
    phases: tuple[str, ...] = ("prefill", "decode")


@cache
def sparse_backends() -> dict[str, BackendSupport]:
    """Sparse-attention backend -> where its kernels run, from data/attention_backends.toml."""
    return {
        name: BackendSupport(
            name=name,
            archs=entry.archs,
            since=entry.since,
            kv_cache_dtypes=entry.kv_cache_dtypes,
            source=" ".join(entry.source.split()),
            phases=entry.phases,
        )
        for name, entry in data.attention_backends().sparse.items()
    }


def _instead(profile: Profile) -> str:
    if profile.fallback_profile:
        return f", or use profile {profile.fallback_profile} (sglang_model_profile)"
    return ""


def check_release_for_arch(profile: Profile, arch: Arch | str | None, sglang_version: str) -> None:
    """FlagVersionError when the profile's [arch.<arch>] table (``arch`` in any spelling)
    asks for a newer SGLang than the pinned one."""
    arch = as_sm(arch) if arch else None
    settings = profile.arch.get(arch) if arch else None
    if settings is None or settings.min_sglang_version is None:
        return
    if parse_version(sglang_version) >= parse_version(settings.min_sglang_version):
        return
    backends = sorted(
        {
            b
            for b in (
                settings.sparse_attention_prefill_backend,
                settings.sparse_attention_decode_backend,
            )
            if b
        }
    )
    what = f" (the first with {' and '.join(backends)} for {arch})" if backends else ""
    raise FlagVersionError(
        f"profile {profile.name} on {arch} GPUs needs SGLang {settings.min_sglang_version} or "
        f"later{what}; the pinned release is {sglang_version}. Pin sglang_version "
        f"{settings.min_sglang_version} or later{_instead(profile)}"
    )


def backend_problems(resolved: Profile, arch: Arch | str, sglang_version: str) -> list[str]:
    """Why the sparse-attention backends of ``resolved`` (a profile already resolved for
    ``arch``, any spelling) cannot run on ``arch`` in ``sglang_version``; empty when they can
    or are not known to data/attention_backends.toml."""
    arch = as_sm(arch)
    problems = []
    version = parse_version(sglang_version)
    for field in SPARSE_FIELDS:
        name = getattr(resolved, field)
        support = sparse_backends().get(name) if name else None
        if support is None:
            continue
        phase = field.removeprefix("sparse_attention_").removesuffix("_backend")
        if phase not in support.phases:
            problems.append(
                f"{field} {name!r} is a {' and '.join(support.phases)} backend only "
                f"({support.source})"
            )
        elif arch not in support.archs:
            problems.append(
                f"{field} {name!r} has no kernels for {arch} (only {', '.join(support.archs)}: "
                f"{support.source})"
            )
        elif support.since and version < parse_version(support.since):
            problems.append(f"{field} {name!r} exists from SGLang {support.since} on")
        elif support.kv_cache_dtypes and resolved.kv_cache_dtype not in support.kv_cache_dtypes:
            problems.append(
                f"{field} {name!r} takes a {' or '.join(support.kv_cache_dtypes)} KV cache, "
                f"not kv_cache_dtype {resolved.kv_cache_dtype!r}"
            )
    return list(dict.fromkeys(problems))


def refusal(profile: Profile, arch: Arch | str, sglang_version: str, problems: list[str]) -> str:
    arch = as_sm(arch)
    return (
        f"profile {profile.name} cannot run on {arch} GPUs with SGLang {sglang_version}: "
        + "; ".join(problems)
        + f". Set backends that run there (an [arch.{arch}] table in the profile, or "
        f"sglang_profile_overrides){_instead(profile)}"
    )
