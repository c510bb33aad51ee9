"""One GPU architecture, whichever way it is spelt.

The same architecture reaches the code as ``sm_120`` (profiles, gpus.toml, ``render --arch``),
``120`` (flash-attn's FLASH_ATTN_CUDA_ARCHS, ``build-plan --archs``), ``12.0`` (nvidia-smi's
compute_cap) and ``sm_120a`` / ``120a`` (arch-specific kernels, a build target only). ``Arch``
reads every one of them and writes each spelling back; data files keep theirs.

Model fields validate through ``SmArch`` (a GPU's architecture, stored as ``sm_120``) and
``FlashAttnArch`` (a build target, stored as ``120`` or ``90a``): the stored values stay the
strings the rest of the code and the JSON records already hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator

# A CUDA architecture number is major * 10 + minor: 80, 89, 90, 100, 120.
_NUMBER = re.compile(r"(?:sm_)?([1-9]\d{1,2})(a?)", re.IGNORECASE)
_COMPUTE_CAP = re.compile(r"([1-9]\d?)\.(\d)")

SPELLINGS = "sm_120, 120, 12.0 (nvidia-smi's compute_cap), sm_120a or 120a (arch-specific)"


class ArchError(ValueError):
    """Text that is no spelling of a GPU architecture."""


@dataclass(frozen=True, order=True)
class Arch:
    """A CUDA architecture: its number (120) and whether it names the arch-specific
    kernels (the ``a`` of ``sm_90a``). Ordered by number, then plain before specific."""

    number: int
    specific: bool = False

    @classmethod
    def parse(cls, text: Any) -> Arch:
        """``sm_120``, ``120``, ``sm_120a``, ``120a``, ``12.0`` (or an Arch) -> Arch;
        ArchError naming the spellings otherwise."""
        if isinstance(text, Arch):
            return text
        # TOML and --data turn 120 into an int and 12.0 into a float: both are still spellings.
        if isinstance(text, int) and not isinstance(text, bool):
            text = str(text)
        elif isinstance(text, float):
            text = f"{text:.1f}"
        if not isinstance(text, str):
            raise ArchError(f"not a GPU architecture: {text!r} (spellings: {SPELLINGS})")
        cleaned = text.strip()
        if match := _COMPUTE_CAP.fullmatch(cleaned):
            return cls(int(match[1]) * 10 + int(match[2]))
        if match := _NUMBER.fullmatch(cleaned):
            return cls(int(match[1]), bool(match[2]))
        raise ArchError(f"not a GPU architecture: {text!r} (spellings: {SPELLINGS})")

    @property
    def suffix(self) -> str:
        return "a" if self.specific else ""

    @property
    def sm(self) -> str:
        """``sm_120``: profiles, gpus.toml, render."""
        return f"sm_{self.number}{self.suffix}"

    @property
    def flash_attn(self) -> str:
        """``120``: FLASH_ATTN_CUDA_ARCHS and build-plan."""
        return f"{self.number}{self.suffix}"

    @property
    def compute_cap(self) -> str:
        """``12.0``: nvidia-smi's spelling."""
        return f"{self.number // 10}.{self.number % 10}"

    @property
    def gpu(self) -> Arch:
        """The architecture a GPU reports: without the arch-specific suffix."""
        return Arch(self.number)

    def covers(self, gpu: Arch) -> bool:
        """Do kernels built for this target run on GPUs of ``gpu``? (``90a`` runs on 9.0.)"""
        return self.number == gpu.number

    def __str__(self) -> str:
        return self.sm


def as_sm(text: Any) -> str:
    """``text`` spelt as ``sm_120``; text that is no architecture ("", "[N/A]") as it is, so
    that a check comparing it with known architectures refuses it by name."""
    try:
        return Arch.parse(text).sm
    except ArchError:
        return str(text or "").strip()


def sort_key(text: Any) -> tuple[int, int, str]:
    """A key that orders architecture spellings by number; unreadable ones first."""
    try:
        arch = Arch.parse(text)
    except ArchError:
        return (0, 0, str(text))
    return (arch.number, int(arch.specific), str(text))


def sorted_archs(archs) -> list[str]:
    return sorted(archs, key=sort_key)


def _gpu_arch_sm(value: Any) -> Any:
    arch = Arch.parse(value)
    if arch.specific:
        raise ArchError(
            f"{value!r} names arch-specific kernels (a build target), not the architecture a "
            f"GPU has: write {arch.gpu.sm}"
        )
    return arch.sm


def _flash_attn_spelling(value: Any) -> Any:
    return Arch.parse(value).flash_attn


# A GPU's architecture, in any spelling but the arch-specific one, stored as "sm_120".
SmArch = Annotated[str, BeforeValidator(_gpu_arch_sm)]
# A flash-attn build target, in any spelling, stored as "120" or "90a".
FlashAttnArch = Annotated[str, BeforeValidator(_flash_attn_spelling)]
