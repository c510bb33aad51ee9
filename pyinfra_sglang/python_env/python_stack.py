"""The order SGLang goes into its virtualenv: the CUDA builds first, each from the one index
that has the right build, then SGLang from PyPI with those held.

uv takes every package an extra index carries from that index alone (its default index
strategy), and PyTorch's CUDA index carries more than torch: an old `sglang` (0.5.2) and an
old `cuda-bindings`. One command with PyPI and PyTorch's index together installs that old
SGLang, or fails on torch's own requirements (docs/packages.md, "The install order"). So no
command here sees two indexes:

1. torch, torchvision and torchaudio at the SGLang release's pins, from PyTorch's index for
   the host's CUDA, without their dependencies (the index is asked for these three names
   only);
2. where PyPI's kernel package is built for another CUDA major than the host's, the kernel's
   build for the host's CUDA from SGLang's own wheel index, the same way;
3. SGLang (and its kernel, where PyPI's fits) from PyPI alone: uv keeps what steps 1 and 2
   installed, as it satisfies SGLang's pins, and installs their dependencies from PyPI.

Which torch, torchvision, torchaudio and kernel each release needs is data
(data/python.toml [sglang] stacks, read from the real wheels)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyinfra_sglang import data
from pyinfra_sglang.data_models import Stack
from pyinfra_sglang.versions import parse_version


@dataclass(frozen=True)
class InstallStep:
    """One ``uv pip install`` from one index."""

    index_url: str
    requirements: dict[str, str]  # project -> pinned version
    no_deps: bool


@dataclass(frozen=True)
class InstallPlan:
    stack: Stack
    steps: tuple[InstallStep, ...]


def public_version(version: str) -> str:
    """``2.14.1+cu130`` -> ``2.14.1``."""
    return version.split("+", 1)[0]


def version_matches(installed: str, pinned: str) -> bool:
    """PEP 440's ``==``: a pin without a local label (``2.14.1``) matches every build of that
    release (``2.14.1+cu130``); one with a label (``0.3.21+cu130``) matches only itself."""
    if "+" in pinned:
        return installed == pinned
    return public_version(installed) == pinned


def stack_for(sglang_version: str) -> Stack:
    """The stack of ``sglang_version``: its row, or the nearest older one; the oldest row for
    a release older than every row (only an unread release the inventory accepts is)."""
    wanted = parse_version(sglang_version)
    stacks = data.python().sglang.stacks
    rows = [row for row in stacks if parse_version(row.sglang) <= wanted]
    return max(rows, key=lambda row: parse_version(row.sglang)) if rows else stacks[0]


def cuda_tag(cuda_version: str) -> str:
    """PyTorch's wheel tag for a CUDA release (``13.1`` -> ``cu130``); SGLang's kernel index
    uses the same tags."""
    return data.python().torch.cuda_tag[cuda_version]


def cuda_major(cuda_version: str) -> int:
    return int(cuda_version.split(".")[0])


def _torch_release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", public_version(version))[:3])


def stack_problem(sglang_version: str, cuda_version: str) -> str | None:
    """Why ``sglang_version`` cannot be installed for ``cuda_version`` from these indexes,
    naming what would do; None when it can."""
    stack = stack_for(sglang_version)
    stacks = data.python().sglang.stacks
    major = cuda_major(cuda_version)
    if stack.kernel_cuda > major:
        older = [row.sglang for row in stacks if row.kernel_cuda <= major]
        cudas = [v for v in data.nvidia().cuda_versions if cuda_major(v) >= stack.kernel_cuda]
        return (
            f"SGLang {sglang_version} has no CUDA {major} install on PyPI: its "
            f"{stack.kernel} {stack.kernel_version} is a CUDA {stack.kernel_cuda} build and "
            f"it requires cuda-python>=13.0. Set cuda_version to {' or '.join(cudas)}"
            + (f", or sglang_version to {older[-1]} or older" if older else "")
        )
    tag = cuda_tag(cuda_version)
    first = data.python().torch.first_release.get(tag)
    if first and _torch_release(stack.torch) < _torch_release(first):
        newer = [
            row.sglang
            for row in stacks
            if _torch_release(row.torch) >= _torch_release(first) and row.kernel_cuda <= major
        ]
        return (
            f"SGLang {sglang_version} pins torch {stack.torch}, which PyTorch did not build "
            f"for {tag} (its first {tag} build is torch {first}). Set sglang_version to "
            + (f"{newer[0]} or newer" if newer else "another release")
            + ", or an older cuda_version"
        )
    return None


def torch_index_url(cuda_version: str, override: str | None = None) -> str:
    """PyTorch's index for ``cuda_version``, or the inventory's own."""
    if override:
        return override
    return f"{data.python().torch.index_base}/{cuda_tag(cuda_version)}"


def kernel_index_url(cuda_version: str, override: str | None = None) -> str:
    """SGLang's kernel index for ``cuda_version``, or the inventory's own."""
    if override:
        return override
    return f"{data.python().kernel.index_base}/{cuda_tag(cuda_version)}"


def install_plan(
    sglang_version: str,
    cuda_version: str,
    pypi_index_url: str,
    torch_index: str | None = None,
    kernel_index: str | None = None,
) -> InstallPlan:
    """The ordered steps that install ``sglang_version`` for ``cuda_version``; ValueError
    naming what would do when it cannot be (validation refuses such an inventory first)."""
    problem = stack_problem(sglang_version, cuda_version)
    if problem:
        raise ValueError(problem)
    stack = stack_for(sglang_version)
    tag = cuda_tag(cuda_version)
    steps = [
        InstallStep(
            torch_index_url(cuda_version, torch_index),
            {
                "torch": stack.torch,
                "torchvision": stack.torchvision,
                "torchaudio": stack.torchaudio,
            },
            no_deps=True,
        )
    ]
    sglang = {"sglang": sglang_version}
    if stack.kernel_cuda == cuda_major(cuda_version):
        sglang[stack.kernel] = stack.kernel_version
    else:
        steps.append(
            InstallStep(
                kernel_index_url(cuda_version, kernel_index),
                {stack.kernel: f"{stack.kernel_version}+{tag}"},
                no_deps=True,
            )
        )
    steps.append(InstallStep(pypi_index_url, sglang, no_deps=False))
    return InstallPlan(stack, tuple(steps))
