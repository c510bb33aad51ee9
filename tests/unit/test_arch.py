"""One GPU-architecture type (pyinfra_sglang/arch.py): every spelling in, every spelling out."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from pyinfra_sglang.arch import Arch, ArchError, FlashAttnArch, SmArch, as_sm, sorted_archs
from pyinfra_sglang.gpus import all_gpus
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.serving.profiles import load_profile, merge_overrides


@pytest.mark.parametrize(
    ("text", "number", "specific"),
    [
        ("sm_120", 120, False),
        ("120", 120, False),
        ("12.0", 120, False),
        ("sm_120a", 120, True),
        ("120a", 120, True),
        (" sm_90 ", 90, False),
        ("9.0", 90, False),
        ("SM_100", 100, False),
        ("8.9", 89, False),
        (120, 120, False),  # TOML or --data gives a number
        (12.0, 120, False),
    ],
)
def test_every_spelling_parses(text, number, specific):
    assert Arch.parse(text) == Arch(number, specific)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sm_",
        "sm_1",
        "abc",
        "1.2.0",
        "12.0.1",
        "sm_1200",
        "[N/A]",
        None,
        True,
        "sm-90x",
        "sm120",
    ],
)
def test_refusal_names_the_text_and_the_spellings(text):
    with pytest.raises(ArchError) as refused:
        Arch.parse(text)
    message = str(refused.value)
    assert repr(text) in message
    assert "sm_120, 120, 12.0" in message


@pytest.mark.parametrize("arch", [Arch(80), Arch(89), Arch(90), Arch(90, True), Arch(120)])
def test_spellings_round_trip(arch):
    assert Arch.parse(arch.sm) == arch
    assert Arch.parse(arch.flash_attn) == arch
    assert Arch.parse(str(arch)) == arch
    assert Arch.parse(arch.compute_cap) == arch.gpu
    assert Arch.parse(arch) is arch


def test_spellings_out():
    arch = Arch.parse("12.0")
    assert (arch.sm, arch.number, arch.flash_attn, arch.compute_cap) == (
        "sm_120",
        120,
        "120",
        "12.0",
    )
    specific = Arch.parse("sm_90a")
    assert (specific.sm, specific.flash_attn, specific.gpu.sm) == ("sm_90a", "90a", "sm_90")
    assert specific.covers(Arch(90)) and Arch(90).covers(Arch(90))
    assert not Arch(90).covers(Arch(120))


def test_ordering_is_by_number_not_text():
    assert Arch(90) < Arch(90, True) < Arch(100) < Arch(120)
    assert sorted_archs(["120", "sm_90", "100", "90a", "8.9"]) == [
        "8.9",
        "sm_90",
        "90a",
        "100",
        "120",
    ]
    # As text, "sm_100" < "sm_90": the reason a type orders them.
    assert sorted(["sm_90", "sm_100"]) == ["sm_100", "sm_90"]
    assert sorted_archs(["sm_90", "sm_100"]) == ["sm_90", "sm_100"]


def test_as_sm_keeps_what_is_no_architecture():
    assert as_sm("12.0") == "sm_120"
    assert as_sm("[N/A]") == "[N/A]"
    assert as_sm(None) == ""


def test_every_gpu_of_the_table_reads_its_arch():
    for spec in all_gpus().values():
        assert Arch.parse(spec.arch).sm == spec.arch


class _Fields(BaseModel):
    gpu: SmArch | None = None
    target: FlashAttnArch | None = None


def test_model_fields_store_one_spelling():
    assert _Fields(gpu="12.0", target="sm_90a").model_dump() == {"gpu": "sm_120", "target": "90a"}
    assert _Fields(gpu=120, target=9.0).model_dump() == {"gpu": "sm_120", "target": "90"}


def test_a_gpu_field_refuses_a_build_target():
    with pytest.raises(
        ValidationError, match=r"'sm_120a' names arch-specific kernels.*write sm_120"
    ):
        _Fields(gpu="sm_120a")


def test_profile_archs_read_every_spelling():
    profile = merge_overrides(load_profile("glm-5-nvfp4"), {"archs": ["10.0", "120"]})
    assert profile.archs == ["sm_100", "sm_120"]
    assert profile.for_arch("12.0") == profile.for_arch("sm_120")


def test_profile_refuses_an_unreadable_arch_with_the_spellings():
    from pyinfra_sglang.serving.profiles import ProfileError

    with pytest.raises(ProfileError, match=r"not a GPU architecture: 'blackwell'.*sm_120, 120"):
        merge_overrides(load_profile("glm-5-nvfp4"), {"archs": ["blackwell"]})


def test_inventory_flash_attn_archs_keep_flash_attns_spelling():
    config = HostConfig(flash_attn_cuda_archs=["sm_90", "12.0", "100a"])
    assert config.flash_attn_cuda_archs == ["90", "120", "100a"]
    with pytest.raises(ValidationError, match="not a GPU architecture: 'hopper'"):
        HostConfig(flash_attn_cuda_archs=["hopper"])
