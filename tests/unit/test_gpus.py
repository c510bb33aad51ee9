"""The GPU spec table (data/gpus.toml) and its lookups."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyinfra_sglang.arch import Arch
from pyinfra_sglang.gpus import (
    GpuSpec,
    UnknownGpuError,
    all_gpus,
    find_gpu,
    gpu_by_name,
    gpu_names,
    known_archs,
    largest_gpu_of_arch,
    other_gpu_models,
)
from pyinfra_sglang.parsers.nvidia_smi import parse_gpu_query_csv

H200_CAPTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "h200x2-nvlink-vm" / "smi.txt"
)

REQUIRED = {
    "NVIDIA H200": "sm_90",
    "NVIDIA H100 80GB HBM3": "sm_90",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "sm_120",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "sm_120",
    "NVIDIA B200": "sm_100",
    "NVIDIA A100-SXM4-80GB": "sm_80",
    "NVIDIA L40S": "sm_89",
}


@pytest.mark.parametrize(("name", "arch"), REQUIRED.items())
def test_required_gpus_are_in_the_table(name, arch):
    assert all_gpus()[name].arch == arch


@pytest.mark.parametrize("spec", all_gpus().values(), ids=lambda s: s.name)
def test_every_spec_is_complete_and_consistent(spec: GpuSpec):
    assert spec.name.startswith("NVIDIA ")
    assert spec.arch in {"sm_80", "sm_89", "sm_90", "sm_100", "sm_120"}
    assert 16 <= spec.memory_gb <= 300
    assert 300 <= spec.memory_bandwidth_gbs <= 10000
    assert spec.pcie_gen in (4, 5, 6)
    assert isinstance(spec.nvlink, bool)
    assert (spec.nvlink_bandwidth_gbs > 0) == spec.nvlink


def test_reference_gpu_has_no_nvlink():
    spec = gpu_by_name("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert (spec.memory_gb, spec.pcie_gen, spec.nvlink, spec.nvlink_bandwidth_gbs) == (
        96,
        5,
        False,
        0,
    )


def test_captured_h200_matches_its_spec():
    # The name, compute capability and memory nvidia-smi printed on a real H200 host.
    block = H200_CAPTURE.read_text().split("### nvidia-smi --query-gpu=index,name,", 1)[1]
    rows = parse_gpu_query_csv(block.split("### rc=", 1)[0].splitlines())
    assert len(rows) == 2
    for row in rows:
        spec = gpu_by_name(row["name"])
        assert spec.name == "NVIDIA H200"
        assert spec.arch == Arch.parse(row["compute_cap"]).sm
        mib = int(row["memory.total"].split()[0])
        assert abs(mib / 1024 - spec.memory_gb) / spec.memory_gb < 0.03


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("NVIDIA H200", "NVIDIA H200"),
        ("nvidia h200", "NVIDIA H200"),
        ("H200", "NVIDIA H200"),
        ("  NVIDIA   L40S ", "NVIDIA L40S"),
        ("A100 SXM4 80GB", "NVIDIA A100-SXM4-80GB"),
        ("rtx pro 6000 blackwell server", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
        ("B200", "NVIDIA B200"),
        # More words than the table has: the spec with the most words in common.
        ("NVIDIA H100 80GB HBM3 SXM5", "NVIDIA H100 80GB HBM3"),
    ],
)
def test_forgiving_lookup(query, name):
    assert gpu_by_name(query).name == name
    assert find_gpu(query) == gpu_by_name(query)


def test_ambiguous_name_lists_the_candidates():
    with pytest.raises(UnknownGpuError, match=r"matches several GPUs: .*H100 80GB HBM3.*H100 PCIe"):
        gpu_by_name("NVIDIA H100")
    assert find_gpu("NVIDIA H100") is None


def test_unknown_name_says_where_to_add_it():
    with pytest.raises(
        UnknownGpuError, match=r"no spec for GPU 'NVIDIA H300'.*closest: .*gpus.toml"
    ):
        gpu_by_name("NVIDIA H300")
    assert find_gpu("") is None


@pytest.mark.parametrize(
    ("arch", "name"),
    [
        ("sm_120", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"),
        ("sm_90", "NVIDIA H200"),
        ("sm_100", "NVIDIA B200"),
        ("sm_80", "NVIDIA A100-SXM4-80GB"),
        ("sm_89", "NVIDIA L40S"),
    ],
)
def test_largest_gpu_of_arch(arch, name):
    spec = largest_gpu_of_arch(arch)
    assert spec.name == name
    assert spec.memory_gb == max(s.memory_gb for s in all_gpus().values() if s.arch == arch)


def test_largest_gpu_of_unknown_arch():
    with pytest.raises(UnknownGpuError, match=r"sm_75.*known: sm_80, sm_89, sm_90, sm_100, sm_120"):
        largest_gpu_of_arch("sm_75")
    assert known_archs() == ["sm_80", "sm_89", "sm_90", "sm_100", "sm_120"]


def test_largest_gpu_of_arch_reads_every_spelling():
    for spelling in ("sm_120", "120", "12.0"):
        assert largest_gpu_of_arch(spelling).arch == "sm_120"


RTX_SERVER = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
RTX_WORKSTATION = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"


def test_gpu_names_are_the_table_names():
    assert gpu_names() == sorted(all_gpus())
    assert RTX_SERVER in gpu_names()


def test_other_gpu_models_names_each_other_model_once():
    assert other_gpu_models(RTX_SERVER, [RTX_SERVER] * 8) == []
    # A spelling of the expected model that stands for it alone is the same model.
    assert other_gpu_models("rtx pro 6000 blackwell server edition", [RTX_SERVER]) == []
    found = [RTX_SERVER, RTX_WORKSTATION, RTX_WORKSTATION, "NVIDIA H999", None]
    assert other_gpu_models(RTX_SERVER, found) == [RTX_WORKSTATION, "NVIDIA H999", "unnamed"]
    # No GPU read (no driver yet): nothing to compare.
    assert other_gpu_models(RTX_SERVER, []) == []
