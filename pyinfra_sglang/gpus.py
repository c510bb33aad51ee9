"""GPU specifications (data/gpus.toml): lookups by nvidia-smi name and by architecture."""

from __future__ import annotations

import difflib
import re

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang import data
from pyinfra_sglang.arch import Arch, sorted_archs
from pyinfra_sglang.data_models import Gpu


class UnknownGpuError(PyinfraError):
    """No spec, or more than one, matches a GPU name or architecture."""


# A GPU's spec is its data model: one type for gpus.toml.
GpuSpec = Gpu


def all_gpus() -> dict[str, GpuSpec]:
    """Every GPU in the table, by the name nvidia-smi prints; ``arch`` as ``sm_90`` whichever
    spelling the table uses."""
    return data.gpus()


def known_archs() -> list[str]:
    return sorted_archs({spec.arch for spec in all_gpus().values()})


def gpu_names() -> list[str]:
    """The GPU models of the table, as nvidia-smi names them."""
    return sorted(all_gpus())


def _tokens(name: str) -> tuple[str, ...]:
    words = re.sub(r"[-_\s]+", " ", name.lower()).split()
    return tuple(words[1:] if words[:1] == ["nvidia"] else words)


def _matches(name: str) -> list[GpuSpec]:
    """Specs a name stands for: exact; same words (case, '-', 'NVIDIA ' ignored); all of its
    words in one spec's name; or the one spec whose words are the most of those given."""
    specs = all_gpus()
    if name in specs:
        return [specs[name]]
    wanted = _tokens(name)
    if not wanted:
        return []
    same = [spec for spec in specs.values() if _tokens(spec.name) == wanted]
    if same:
        return same
    within = [spec for spec in specs.values() if set(wanted) <= set(_tokens(spec.name))]
    if within:
        return within
    covered = [spec for spec in specs.values() if set(_tokens(spec.name)) <= set(wanted)]
    most = max((len(_tokens(spec.name)) for spec in covered), default=0)
    return [spec for spec in covered if len(_tokens(spec.name)) == most]


def find_gpu(name: str) -> GpuSpec | None:
    """The spec ``name`` stands for; None when none or several match."""
    found = _matches(name)
    return found[0] if len(found) == 1 else None


def gpu_by_name(name: str) -> GpuSpec:
    """The spec ``name`` stands for; UnknownGpuError (with candidates) when none or several."""
    found = _matches(name)
    if len(found) == 1:
        return found[0]
    if found:
        names = ", ".join(sorted(spec.name for spec in found))
        raise UnknownGpuError(
            f"GPU name {name!r} matches several GPUs: {names}; give the full name"
        )
    close = difflib.get_close_matches(name, list(all_gpus()), n=3, cutoff=0.4)
    hint = f" (closest: {', '.join(close)})" if close else ""
    raise UnknownGpuError(
        f"no spec for GPU {name!r}{hint}; add it to pyinfra_sglang/data/gpus.toml"
    )


def largest_gpu_of_arch(arch: str) -> GpuSpec:
    """The GPU of ``arch`` with the most memory; ties go to more bandwidth, then to the
    shortest name (the plain model, "NVIDIA H200" over "NVIDIA H200 NVL")."""
    wanted = Arch.parse(arch).sm
    specs = [spec for spec in all_gpus().values() if spec.arch == wanted]
    if not specs:
        raise UnknownGpuError(
            f"no GPU of architecture {arch!r} in the spec table; known: {', '.join(known_archs())}"
        )
    return min(specs, key=lambda s: (-s.memory_gb, -s.memory_bandwidth_gbs, len(s.name), s.name))


def other_gpu_models(expected: str, found_names: list[str | None]) -> list[str]:
    """The names nvidia-smi reports that are not the ``expected`` model, each once, in the
    order found; [] when every GPU is it (or none is found: nothing to compare)."""
    want = gpu_by_name(expected).name
    others: list[str] = []
    for name in found_names:
        spec = find_gpu(name or "")
        if (spec.name if spec else name) != want and (name or "unnamed") not in others:
            others.append(name or "unnamed")
    return others


class OtherGpuModelError(PyinfraError):
    """The GPUs a host reports are not the inventory's expected_gpu_model."""


def refuse_other_gpu_model(host_name: str, expected: str | None, gpus: list[dict]) -> None:
    """OtherGpuModelError when ``expected`` (expected_gpu_model) is set and a GPU of ``gpus``
    (NvidiaGpus rows) is another model: everything validation planned (memory fit, tensor
    parallelism, backends) was planned for the expected one. Nothing to compare before
    nvidia-smi answers."""
    if not expected:
        return
    others = other_gpu_models(expected, [gpu.get("name") for gpu in gpus])
    if not others:
        return
    found = [gpu for gpu in gpus if (gpu.get("name") or "unnamed") in others]
    indexes = ", ".join(str(gpu.get("index", "?")) for gpu in found)
    raise OtherGpuModelError(
        f"host {host_name}: expected_gpu_model = {expected!r}, but nvidia-smi reports "
        f"GPU{'s' if len(found) > 1 else ''} {indexes} as {', '.join(others)}: validation "
        "planned the memory fit, tensor parallelism and backends for the expected model; "
        "allowed: the model the host has (expected_gpu_model), or unset to take what is "
        "found\nNothing was changed."
    )
