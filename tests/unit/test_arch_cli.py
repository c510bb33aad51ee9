"""The CLI reads every spelling of a GPU architecture (arch.Arch): `render --arch` and
`build-plan --archs`."""

from __future__ import annotations

import pytest

RENDER = ["render", "--profile", "glm-5-nvfp4", "--gpus", "8", "--sglang-version", "0.5.23"]


def test_render_takes_any_spelling_of_the_arch(capsys):
    from pyinfra_sglang.cli.main import main

    outputs = []
    for spelling in ("sm_120", "120", "12.0"):
        assert main([*RENDER, "--arch", spelling]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] == outputs[2]
    assert "8 x 96 GB sm_120" in outputs[0]
    assert "--dsa-decode-backend flashinfer_sparse_mla" in outputs[0]


@pytest.mark.parametrize("spelling", ["sm_120a", "hopper", "sm120"])
def test_render_refuses_what_is_no_gpu_architecture(capsys, spelling):
    from pyinfra_sglang.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main([*RENDER, "--arch", spelling])
    assert exited.value.code == 2
    assert f"not a CUDA architecture: {spelling!r}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spelling", "env"),
    [
        ("90,120", "90;120"),
        ("sm_90,sm_120", "90;120"),
        ("9.0;12.0", "90;120"),
        ("90a,sm_120", "90a;120"),
    ],
)
def test_build_plan_takes_any_spelling_of_the_archs(capsys, spelling, env):
    from pyinfra_sglang.cli.main import main

    assert main(["build-plan", "--cores", "32", "--mem-gb", "256", "--archs", spelling]) == 0
    assert f"FLASH_ATTN_CUDA_ARCHS={env!r}" in capsys.readouterr().out
