"""The Python environment: uv, the versioned virtualenv, the package indexes and the
flash-attn build (roles/python_env.py, flash_attn.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, HttpUrl, StrictBool

from pyinfra_sglang import data
from pyinfra_sglang.arch import FlashAttnArch
from pyinfra_sglang.config.types import (
    RELEASE_PATTERN,
    SAFE_HOST_PATH,
    FieldGroup,
    allowed,
    no_bool,
    path_fits,
    version_text,
)

_python = data.python()


def versioned_venv_path(sglang_version: str, python_version: str, cuda_version: str) -> str:
    """The virtualenv of one SGLang / Python / CUDA combination (data/python.toml [venv])."""
    venv = _python.venv
    name = venv.name.format(sglang=sglang_version, python=python_version, cuda=cuda_version)
    return f"{venv.root.rstrip('/')}/{name}"


class PythonEnvFields(FieldGroup):
    """The Python environment: uv, the virtualenv, the indexes, flash-attn."""

    pypi_index_url: HttpUrl = Field(
        HttpUrl("https://pypi.org/simple"),
        description="Python package index (or a mirror of it) for uv, SGLang and flash-attn.",
        json_schema_extra=allowed("an http(s) URL of a PEP 503 simple index"),
    )

    uv_version: Annotated[
        str, version_text(_python.uv.version), Field(pattern=r"^\d+(\.\d+)+$")
    ] = Field(
        _python.uv.version,
        description="uv release installed on the host (with pip, from `pypi_index_url`).",
        json_schema_extra=allowed("a release number such as 0.13.9"),
    )

    python_version: Annotated[
        str, version_text(_python.venv.python), Field(pattern=r"^3\.\d+$")
    ] = Field(
        _python.venv.python,
        description=(
            "Python of the SGLang virtualenv; the host's own when it has that version, "
            "else uv installs it."
        ),
        json_schema_extra=allowed("3.N, such as 3.12"),
    )

    venv_path: Annotated[str, Field(pattern=SAFE_HOST_PATH), AfterValidator(path_fits)] = Field(
        None,  # filled in by _versioned_venv
        description=(
            "Where the SGLang virtualenv lives on the host; unset: one per SGLang, Python and "
            "CUDA release, `/opt/sglang/venvs/<sglang>-py<python>-cu<cuda>`, built beside the "
            "running one and switched to in the service step (the newest two are kept)."
        ),
        json_schema_extra=allowed(
            "an absolute path of letters, digits, '.', '_', '-', '/', or unset"
        ),
    )

    torch_index_url: HttpUrl | None = Field(
        None,
        description=(
            "Index torch, torchvision and torchaudio are installed from, before SGLang and "
            "alone (never beside `pypi_index_url`); unset: PyTorch's index for `cuda_version` "
            "(e.g. https://download.pytorch.org/whl/cu130)."
        ),
        json_schema_extra=allowed("an http(s) URL of a PEP 503 simple index, or unset"),
    )

    sglang_kernel_index_url: HttpUrl | None = Field(
        None,
        description=(
            "Index SGLang's kernel package is installed from where PyPI's is built for another "
            "CUDA major than `cuda_version` (SGLang 0.5.6 .. 0.5.10 on CUDA 13); unset: "
            "SGLang's own index for `cuda_version` (e.g. https://docs.sglang.io/whl/cu130)."
        ),
        json_schema_extra=allowed("an http(s) URL of a PEP 503 simple index, or unset"),
    )

    flash_attn_build: StrictBool | None = Field(
        None,
        description=(
            "Build flash-attn (the `flash_attn` package of flash-attn 2, ~30 min from source) "
            "into the virtualenv. Unset: only where the profile needs it on the host's GPUs: "
            "its attention backend is fa3 on GPUs other than sm_8x/sm_9x, where SGLang's FA3 "
            "wrapper falls back to it (the deploy and `plan` say why; "
            "[packages.md](packages.md#flash-attn)). true: always (a vision model or remote "
            "model code that imports it); false: never. Not built: the role builds nothing "
            "and the audit says why; a flash-attn already there stays."
        ),
        json_schema_extra=allowed("true, false, or unset (by need)"),
    )

    flash_attn_version: Annotated[
        str, version_text(_python.flash_attn.version), Field(pattern=RELEASE_PATTERN)
    ] = Field(
        _python.flash_attn.version,
        description="flash-attn release built from source into the virtualenv.",
        json_schema_extra=allowed("a release number such as 2.8.3"),
    )

    flash_attn_cuda_archs: list[FlashAttnArch] | None = Field(
        None,
        description=(
            "CUDA architectures flash-attn is built for, kept as flash-attn spells them "
            "(sm_90, 9.0 and 90 are all 90); unset: those of the GPUs found."
        ),
        json_schema_extra=allowed(
            'a list such as ["90"], ["120"] or ["sm_90", "sm_120"] (90a: arch-specific), or unset'
        ),
    )

    flash_attn_build_once: StrictBool = Field(
        False,
        description=(
            "Build flash-attn once a site: of the hosts of a run with this set that build the "
            "same release into the same virtualenv for the same CUDA architectures, the first "
            "in the inventory builds and keeps its wheel, and the others install that wheel "
            "(passed through the controller, checked by sha256) instead of building. Needs "
            "the architectures when planning: the GPUs nvidia-smi reports, or "
            "`flash_attn_cuda_archs`."
        ),
        json_schema_extra=allowed("true, false"),
    )

    flash_attn_memory_fraction: Annotated[float, BeforeValidator(no_bool)] = Field(
        _python.flash_attn.memory_fraction,
        gt=0,
        le=0.95,
        description="Share of available memory the flash-attn build's estimated peak may use.",
        json_schema_extra=allowed("above 0, at most 0.95"),
    )
