"""How many compile jobs a flash-attn source build may run on a host.

flash-attn compiles with ninja (``MAX_JOBS`` parallel jobs), each running nvcc with
``NVCC_THREADS`` threads; each nvcc thread peaks at ~5 GB. The plan keeps the estimated peak
(jobs x threads x 5 GB) under a safety fraction of the host's available memory, and as close
to it as the cores allow (jobs x threads <= cores). The role and `pyinfra-sglang build-plan`
both call ``plan_flash_attn_build``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang import data
from pyinfra_sglang.arch import Arch, ArchError, sorted_archs


class BuildPlanError(PyinfraError):
    """Not even one compile job fits in the host's memory, or the host's numbers make no
    plan (no cores, memory that is not a finite number, a memory fraction outside (0, 1])."""


@dataclass(frozen=True)
class BuildPlan:
    max_jobs: int
    nvcc_threads: int
    archs: tuple[str, ...]
    cores: int
    available_gb: float
    memory_fraction: float
    gb_per_thread: float

    @property
    def bound_gb(self) -> float:
        return self.available_gb * self.memory_fraction

    @property
    def estimated_peak_gb(self) -> float:
        return self.max_jobs * self.nvcc_threads * self.gb_per_thread

    def env(self) -> dict[str, str]:
        return {
            "MAX_JOBS": str(self.max_jobs),
            "NVCC_THREADS": str(self.nvcc_threads),
            "FLASH_ATTN_CUDA_ARCHS": ";".join(self.archs),
            "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
        }

    def describe(self) -> str:
        variables = " ".join(
            f"{k}={v}" for k, v in self.env().items() if k != "FLASH_ATTENTION_FORCE_BUILD"
        )
        return (
            f"{variables} (estimated peak {self.estimated_peak_gb:.0f} GB, bound "
            f"{self.bound_gb:.0f} GB = {self.memory_fraction:.0%} of {self.available_gb:.0f} GB "
            f"available, {self.cores} cores)"
        )


def archs_from_compute_caps(compute_caps: list[str]) -> tuple[str, ...]:
    """nvidia-smi's compute_cap ("9.0", "12.0") -> FLASH_ATTN_CUDA_ARCHS entries ("90", "120");
    a GPU without one ("", "[N/A]") adds none."""
    archs = set()
    for cap in compute_caps:
        try:
            archs.add(Arch.parse(cap))
        except ArchError:
            continue
    return tuple(arch.flash_attn for arch in sorted(archs))


def build_log_paths(version: str) -> tuple[str, str]:
    """The build's log and its record on the host: what the role writes and the audit reads."""
    log_dir = data.python().flash_attn.log_dir
    return f"{log_dir}/flash-attn-{version}-build.log", f"{log_dir}/flash-attn-{version}-build.json"


def archs_text(archs) -> str:
    return ", ".join(sorted_archs(archs)) or "none"


def built_archs(record: dict | None) -> tuple[str, ...] | None:
    """The CUDA architectures a build record says flash-attn was built for: its ``archs``, or,
    in a record written before it held them, the FLASH_ATTN_CUDA_ARCHS of its ``env``. None
    when there is no record or it names none."""
    if not isinstance(record, dict):
        return None
    archs = record.get("archs")
    if not isinstance(archs, list):
        env = record.get("env")
        text = env.get("FLASH_ATTN_CUDA_ARCHS") if isinstance(env, dict) else None
        archs = text.split(";") if isinstance(text, str) else []
    archs = [str(arch).strip() for arch in archs if str(arch).strip()]
    return tuple(sorted_archs(set(archs))) or None


def _covered(gpu: str, built: tuple[str, ...]) -> bool:
    try:
        wanted = Arch.parse(gpu)
    except ArchError:
        return gpu in built
    targets = []
    for arch in built:
        try:
            targets.append(Arch.parse(arch))
        except ArchError:
            continue
    return any(target.covers(wanted) for target in targets)


def uncovered_archs(built: tuple[str, ...], gpu_archs: tuple[str, ...]) -> list[str]:
    """The GPUs' architectures a build has no kernels for ("90a" kernels run on 9.0 GPUs),
    whichever spelling either side uses."""
    return [arch for arch in gpu_archs if not _covered(arch, built)]


def rebuild_reason(
    built: tuple[str, ...] | None,
    gpu_archs: tuple[str, ...],
    archs_override: list[str] | tuple[str, ...] | None,
) -> str | None:
    """Why an installed flash-attn of the pinned version must be built again, or None when
    its build covers what is wanted: ``flash_attn_cuda_archs`` exactly when set, else every
    architecture among the GPUs found (none found: nothing to judge against).

    ``built``: ``built_archs`` of the host's record (None: no record names them)."""
    if built is None:
        return "no build record names the CUDA architectures it was built for"
    if archs_override:
        wanted = tuple(sorted_archs(set(archs_override)))
        if wanted != built:
            return (
                f"flash_attn_cuda_archs is {archs_text(wanted)}, the installed build is for "
                f"{archs_text(built)}"
            )
        return None
    missing = uncovered_archs(built, gpu_archs)
    if missing:
        return (
            f"the GPUs found are {archs_text(gpu_archs)}: the installed build has no kernels "
            f"for {archs_text(missing)} (built for {archs_text(built)})"
        )
    return None


def plan_flash_attn_build(
    cores: int,
    available_gb: float,
    archs: tuple[str, ...] | list[str],
    memory_fraction: float | None = None,
) -> BuildPlan:
    """The largest MAX_JOBS x NVCC_THREADS whose estimated peak fits the memory bound."""
    settings = data.python().flash_attn
    fraction = memory_fraction if memory_fraction is not None else settings.memory_fraction
    per_thread = float(settings.gb_per_nvcc_thread)
    if cores < 1:
        raise BuildPlanError(f"a build needs at least 1 CPU core, not {cores}")
    if not math.isfinite(available_gb) or available_gb < 0:
        raise BuildPlanError(f"available memory must be a number of GB, not {available_gb}")
    if not 0 < fraction <= 1:
        raise BuildPlanError(f"the memory fraction must be above 0 and at most 1, not {fraction}")
    if not archs:
        raise BuildPlanError("no CUDA architectures to build for: no GPUs found and none given")
    threads_that_fit = int(available_gb * fraction // per_thread)
    if threads_that_fit < 1:
        raise BuildPlanError(
            f"not even one flash-attn compile job fits: it needs ~{per_thread:.0f} GB, and the "
            f"bound is {available_gb * fraction:.1f} GB ({fraction:.0%} of {available_gb:.1f} GB "
            "available); free memory or build elsewhere"
        )
    candidates = []
    for threads in range(min(settings.max_nvcc_threads, max(1, cores)), 0, -1):
        jobs = min(max(1, cores // threads), threads_that_fit // threads)
        if jobs >= 1:
            candidates.append((jobs * threads, threads, jobs))
    _, threads, jobs = max(candidates)  # most threads in flight; ties: more per nvcc
    return BuildPlan(
        max_jobs=jobs,
        nvcc_threads=threads,
        archs=tuple(archs),
        cores=cores,
        available_gb=available_gb,
        memory_fraction=fraction,
        gb_per_thread=per_thread,
    )


def flash_attn_default_jobs(cores: int, available_gb: float) -> int:
    """MAX_JOBS that flash-attn's setup.py picks when unset: half the cores, or one job per
    9 GB available, whichever is less, with its default NVCC_THREADS=4 and no margin."""
    return max(1, min(cores // 2, int(available_gb / 9)))


# --- progress of a running build ---------------------------------------------------------

# ninja's status prefix, "[N/M] ", at the start of a line; uv -v streams the build backend's
# output with "DEBUG " in front of each line.
# At most 9 digits: a 5,000-digit count is no ninja's, and int() of it raised in the monitor.
_NINJA_STEP = re.compile(r"^(?:DEBUG )?\s*\[(\d{1,9})/(\d{1,9})\]\s", re.MULTILINE)


def ninja_steps(log_text: str) -> tuple[int, int] | None:
    """The last ninja ``[N/M]`` in a build log: (steps done, total); None before ninja runs."""
    found = None
    for match in _NINJA_STEP.finditer(log_text):
        done, total = int(match[1]), int(match[2])
        if total > 0 and done <= total:
            found = (done, total)
    return found


def duration_text(seconds: float) -> str:
    """``45 s``, ``12 min 05 s``, ``1 h 02 min``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


@dataclass
class BuildProgress:
    """Progress lines of one build, from its log as it grows. The ETA is the rate of compile
    steps since ninja was first seen (the download and set-up before it do not count), so it
    needs two looks at the log with steps done between them."""

    first: tuple[float, int] | None = None  # (elapsed s, steps done) when ninja first showed

    def line(self, elapsed_s: float, log_text: str) -> str:
        steps = ninja_steps(log_text)
        text = f"building for {duration_text(elapsed_s)}"
        if steps is None:
            return f"{text}; no compile steps in the log yet"
        done, total = steps
        if self.first is None:
            self.first = (elapsed_s, done)
        text += f"; compile steps {done}/{total} ({done / total:.0%})"
        eta = self._eta_s(elapsed_s, done, total)
        return f"{text}, about {duration_text(eta)} left" if eta is not None else text

    def _eta_s(self, elapsed_s: float, done: int, total: int) -> float | None:
        since, done_then = self.first or (elapsed_s, done)
        if done <= done_then or elapsed_s <= since:
            return None
        return (total - done) * (elapsed_s - since) / (done - done_then)
