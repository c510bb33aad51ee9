"""Load the project's data files (pyinfra_sglang/data/*.toml) once, validated.

Each file has a model in ``data_models/<file>.py`` and a typed accessor here
(``data.nvidia()``, ``data.python()``...), read and validated once per process. A malformed
file fails at its first load with DataError naming the file and the key. There is no raw
access: a reader adds the key to the file's model and reads the attribute.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib.resources import files
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from pyinfra_sglang import data_models as m

_M = TypeVar("_M", bound=BaseModel)


class DataError(ValueError):
    """A data file that does not match its model: the file and each bad key named."""


def _path(name: str) -> str:
    return f"pyinfra_sglang/data/{name}.toml"


def _read(name: str) -> dict[str, Any]:
    text = files("pyinfra_sglang").joinpath("data", f"{name}.toml").read_text()
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise DataError(f"{_path(name)}: {error}") from error


def validate(name: str, raw: dict[str, Any], model: type[_M] | None = None) -> _M:
    """``raw`` (the tables of data file ``name``) as its model; DataError naming the file
    and every key that does not fit. Tests pass mutated copies through here."""
    model = model or m.MODELS[name]
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or '(top level)'}: {e['msg']}"
            for e in error.errors()
        )
        raise DataError(f"{_path(name)}: {problems}") from None


@cache
def _model(name: str) -> BaseModel:
    return validate(name, _read(name))


def _typed(name: str, model: type[_M]) -> _M:
    value = _model(name)
    assert isinstance(value, model), (name, model)
    return value


# --- typed accessors, one per file --------------------------------------------------------


def apt() -> m.Apt:
    return _typed("apt", m.Apt)


def attention_backends() -> m.AttentionBackends:
    return _typed("attention_backends", m.AttentionBackends)


def diagnosis() -> m.Diagnosis:
    return _typed("diagnosis", m.Diagnosis)


def dcgm() -> m.Dcgm:
    return _typed("dcgm", m.Dcgm)


def gpu_health() -> m.GpuHealth:
    return _typed("gpu_health", m.GpuHealth)


def gpus() -> dict[str, m.Gpu]:
    """GPU name as nvidia-smi prints it -> its numbers."""
    return _typed("gpus", m.Gpus).root


def memory_fit() -> m.MemoryFit:
    return _typed("memory_fit", m.MemoryFit)


def model() -> m.Model:
    return _typed("model", m.Model)


def model_families() -> m.ModelFamilies:
    return _typed("model_families", m.ModelFamilies)


def model_shape() -> m.ModelShapeData:
    return _typed("model_shape", m.ModelShapeData)


def monitoring() -> m.Monitoring:
    return _typed("monitoring", m.Monitoring)


def multinode_firewall() -> m.MultinodeFirewall:
    return _typed("multinode_firewall", m.MultinodeFirewall)


def multinode_preflight() -> m.MultinodePreflight:
    return _typed("multinode_preflight", m.MultinodePreflight)


def host_driver() -> m.HostDriver:
    return _typed("host_driver", m.HostDriver)


def nvidia() -> m.Nvidia:
    return _typed("nvidia", m.Nvidia)


def nvidia_smi() -> m.NvidiaSmi:
    return _typed("nvidia_smi", m.NvidiaSmi)


def parallelism() -> m.Parallelism:
    return _typed("parallelism", m.Parallelism)


def pcie() -> m.Pcie:
    return _typed("pcie", m.Pcie)


def platforms() -> m.Platforms:
    return _typed("platforms", m.Platforms)


def python() -> m.Python:
    return _typed("python", m.Python)


def report() -> m.Report:
    return _typed("report", m.Report)


def sglang_bench() -> m.SglangBench:
    return _typed("sglang_bench", m.SglangBench)


def sglang_flags() -> m.SglangFlags:
    return _typed("sglang_flags", m.SglangFlags)


def sglang_service() -> m.SglangService:
    return _typed("sglang_service", m.SglangService)


def tuning() -> m.Tuning:
    return _typed("tuning", m.Tuning)


def rollout() -> m.Rollout:
    return _typed("rollout", m.Rollout)


def watchdog() -> m.Watchdog:
    return _typed("watchdog", m.Watchdog)
