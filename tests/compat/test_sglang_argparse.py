"""Every profile's rendered SGLang command, parsed by that SGLang release's own parser.

For each release in sglang_versions.toml, a cached venv holds the real ``sglang==V`` from
PyPI (tests/compat/sglang_env.py); a subprocess on that venv's python builds
``argparse.ArgumentParser()`` with ``ServerArgs.add_cli_args``, merges ``--config`` with
SGLang's own ConfigArgumentMerger and parses each rendered argv, as
``sglang.srt.server_args.prepare_server_args`` does before a server starts
(tests/compat/sglang_argparse_probe.py). A flag the real parser does not know, or a value it
refuses, fails the test with the flag and the release named.

The first run builds the venvs (a few minutes, ~7 GB under
``~/.cache/pyinfra-sglang/sglang-compat``, or ``$PYINFRA_SGLANG_TEST_CACHE``); later runs
reuse them. A release's verdict is also kept in its venv (``argparse-results/``), keyed by
everything it depends on: the probe's source, the request (every rendered argv and config
file) and the venv's build record. So a run whose rendered commands changed imports that
release's SGLang again (~8 s each), and one that changed nothing reads the kept verdict.
``-m "not compat"`` leaves these tests out.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pyinfra_sglang.gpus import known_archs
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.serving.placement import check_layout, profile_for_gpus
from pyinfra_sglang.serving.profiles import available_profiles, load_profile, merge_overrides
from pyinfra_sglang.serving.render import RenderError, render_config_yaml
from pyinfra_sglang.serving.sglang_flags import FlagVersionError, flag_table
from pyinfra_sglang.versions import parse_version
from tests.compat.sglang_env import READY, EnvUnavailable, env_failed, sglang_env
from tests.unit.test_render import placed_args

pytestmark = pytest.mark.compat

HERE = Path(__file__).parent
PROBE = HERE / "sglang_argparse_probe.py"
VERSIONS: list[str] = tomllib.loads((HERE / "sglang_versions.toml").read_text())["versions"]
PROFILES = list(available_profiles())
# Each profile on every GPU architecture it allows that data/gpus.toml knows.
ARCHS = {
    name: [arch for arch in known_archs() if arch in (load_profile(name).archs or known_archs())]
    for name in PROFILES
}

TP_SIZE = 8
HOST = "127.0.0.1"
PORT = 30000
CONFIG_PATH = "/etc/sglang/sglang.yaml"
API_KEY = "compat-test-key"
PROBE_TIMEOUT_S = 600


@dataclass(frozen=True)
class Layout:
    """How a profile is deployed: the deployment values render.server_args takes."""

    name: str
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None
    api_key: str | None = None
    mtp: bool = False  # sglang_profile_overrides {"mtp": true}: the speculative flags
    tuned: bool = False  # every setting deploy/tune.py searches, set (TUNED below)
    moe: tuple[tuple[str, Any], ...] = ()  # MoE layout overrides (ep_size, ...), issue 28


# One value of each setting the tuner searches (data/tuning.toml), as a winner's overrides.
TUNED = {
    "mem_fraction_static": 0.8,
    "cuda_graph_max_bs": 32,
    "chunked_prefill_size": 2048,
    "schedule_policy": "lof",
    "max_running_requests": 64,
}
LAYOUTS = (
    Layout("1-node-api-key", api_key=API_KEY),
    Layout("1-node-tuned", api_key=API_KEY, tuned=True),
    Layout("2-nodes-rank-1", nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:50000"),
)
# MTP, for each profile whose model has a next-token layer (the others refuse it).
MTP_LAYOUT = Layout("1-node-mtp", api_key=API_KEY, mtp=True)
MTP_PROFILES = [name for name in PROFILES if load_profile(name).mtp_layers]
# MoE layouts at TP 8, for each profile of an MoE model: EP over all ranks (what SGLang's
# FP4 MoE runner on SM120 takes), with DP attention in groups, and the all-to-all with DP
# attention over all ranks (data/parallelism.toml).
MOE_LAYOUTS = (
    Layout("1-node-ep8", api_key=API_KEY, moe=(("ep_size", 8),)),
    Layout(
        "1-node-ep8-dp-attention-2",
        api_key=API_KEY,
        moe=(("ep_size", 8), ("dp_attention_size", 2)),
    ),
    Layout(
        "1-node-ep8-dp-attention-8-deepep",
        api_key=API_KEY,
        moe=(("ep_size", 8), ("dp_attention_size", 8), ("moe_a2a_backend", "deepep")),
    ),
)
MOE_PROFILES = [name for name in PROFILES if load_profile(name).num_routed_experts]
CASES = [
    (name, arch, layout)
    for name in PROFILES
    for arch in ARCHS[name]
    for layout in LAYOUTS
    + ((MTP_LAYOUT,) if name in MTP_PROFILES else ())
    + (MOE_LAYOUTS if name in MOE_PROFILES else ())
]


def render(profile_name: str, version: str, arch: str, layout: Layout) -> list[str]:
    """The argv a host with GPUs of ``arch`` gets: the profile resolved for them, as the
    service role renders it (profile_for_gpus refuses what cannot run there)."""
    profile = load_profile(profile_name)
    if layout.mtp:
        profile = merge_overrides(profile, {"mtp": True})
    if layout.tuned:
        profile = merge_overrides(profile, TUNED)
    if layout.moe:
        profile = merge_overrides(profile, dict(layout.moe))
        # As the service role: a layout SGLang refuses is never rendered.
        check_layout(profile, TP_SIZE, version, arch)
    return placed_args(
        profile_for_gpus(profile, arch, version),
        version,
        TP_SIZE,
        HOST,
        PORT,
        CONFIG_PATH,
        nnodes=layout.nnodes,
        node_rank=layout.node_rank,
        dist_init_addr=layout.dist_init_addr,
    )


def case_name(profile_name: str, arch: str, layout: Layout) -> str:
    return f"{profile_name}/{arch}/{layout.name}"


@dataclass
class ParserRun:
    """One release's probe: its output, or why there is none."""

    version: str
    result: dict[str, Any] | None = None
    unavailable: EnvUnavailable | None = None
    error: str | None = None

    def output(self) -> dict[str, Any]:
        if self.unavailable:
            env_failed(self.unavailable)  # fails, or skips saying the index is out of reach
        if self.error:
            pytest.fail(self.error, pytrace=False)
        assert self.result is not None
        return self.result


def kept_verdict(env_root: Path, request_text: str) -> Path:
    """Where the probe's output for this request on this venv is kept."""
    digest = hashlib.sha256()
    for part in (PROBE.read_bytes(), request_text.encode(), (env_root / READY).read_bytes()):
        digest.update(hashlib.sha256(part).digest())
    return env_root / "argparse-results" / f"{digest.hexdigest()[:24]}.json"


@pytest.fixture(scope="session")
def sglang_parsers(tmp_path_factory) -> dict[str, ParserRun]:
    """Release -> its parser's verdict on every renderable profile x layout. The venvs are
    built one after another; the probes (~8 s of imports each) then run side by side."""
    workdir = tmp_path_factory.mktemp("sglang-argparse")
    runs = {version: ParserRun(version) for version in VERSIONS}
    started = {}
    for version, run in runs.items():
        try:
            env = sglang_env(version)
        except EnvUnavailable as error:
            run.unavailable = error
            continue
        cases = []
        for profile_name, arch, layout in CASES:
            try:
                argv = render(profile_name, version, arch, layout)
            except (FlagVersionError, RenderError):
                continue  # asserted by test_the_refused_cases_are_the_known_ones
            cases.append(
                {
                    "name": case_name(profile_name, arch, layout),
                    "argv": argv,
                    "config_yaml": render_config_yaml(layout.api_key),
                }
            )
        request = workdir / f"request-{version}.json"
        request.write_text(json.dumps({"cases": cases}, sort_keys=True))
        kept = kept_verdict(env.root, request.read_text())
        if kept.exists():
            run.result = json.loads(kept.read_text())
            continue
        result = workdir / f"result-{version}.json"
        process = subprocess.Popen(
            [str(env.python), str(PROBE), str(request), str(result)],
            cwd="/",  # not the checkout: nothing of the project is importable there
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started[version] = (process, result, kept)
    for version, (process, result, kept) in started.items():
        run = runs[version]
        try:
            output, _ = process.communicate(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        if process.returncode != 0 or not result.exists():
            run.error = (
                f"the argparse probe on SGLang {version} exited {process.returncode}:\n"
                + output[-3000:]
            )
            continue
        data = json.loads(result.read_text())
        if data["import_error"]:
            run.error = (
                f"SGLang {version}: `import sglang.srt.server_args` failed in "
                f"{sglang_env(version).root}. A ModuleNotFoundError means a distribution is "
                "missing from IMPORT_TIME_DISTRIBUTIONS (tests/compat/sglang_env.py):\n"
                + data["import_error"][-3000:]
            )
            continue
        if data["sglang_version"] != version:
            run.error = f"{data['server_args_file']} is SGLang {data['sglang_version']}"
            continue
        run.result = data
        kept.parent.mkdir(exist_ok=True)
        kept.write_text(json.dumps(data))
    return runs


def test_pinned_versions_include_the_inventory_default():
    default = HostConfig().sglang_version
    assert default in VERSIONS, (
        f"the inventory's default sglang_version {default} is not checked against its real "
        "parser: add it to tests/compat/sglang_versions.toml"
    )


def _check_value(flag: str, rendered: str, parsed: Any) -> str | None:
    """Why ``parsed`` (the namespace value) is not what ``flag rendered`` asked for, or None."""
    if isinstance(parsed, list) and len(parsed) == 1:
        parsed = parsed[0]
    if isinstance(parsed, bool) or parsed is None:
        same = False
    elif isinstance(parsed, (int, float)):
        same = float(rendered) == parsed
    else:
        same = str(parsed) == rendered
    return None if same else f"{flag} {rendered} parsed as {parsed!r}"


def refusal(version: str, profile_name: str, arch: str, layout: Layout) -> str | None:
    """Why the renderer refuses this case on this release (min_sglang_version, a sparse
    backend without kernels for the arch there), or None when it renders."""
    try:
        render(profile_name, version, arch, layout)
    except (FlagVersionError, RenderError) as error:
        return str(error)
    return None


# Every case on every release: rendered ones go through the release's parser, refused ones
# are asserted as refusals (test_the_refused_cases_are_the_known_ones), none is skipped.
REFUSALS = {(version, *case): refusal(version, *case) for version in VERSIONS for case in CASES}
RENDERED = [key for key, why in REFUSALS.items() if why is None]
# GLM-5's sparse MLA on sm_120 needs flashinfer_sparse_mla, first in SGLang 0.5.17
# (data/sglang_flags.toml): the older pinned releases refuse it, naming the dense profile.
KNOWN_REFUSALS = {
    (version, "glm-5-nvfp4", "sm_120", layout.name): "glm-5-nvfp4-dense"
    for version in VERSIONS
    if parse_version(version) < parse_version("0.5.17")
    for layout in (*LAYOUTS, MTP_LAYOUT, *MOE_LAYOUTS)
}


def test_the_refused_cases_are_the_known_ones():
    refused = {
        (version, name, arch, layout.name): why
        for (version, name, arch, layout), why in REFUSALS.items()
        if why is not None
    }
    assert set(refused) == set(KNOWN_REFUSALS), sorted(set(refused) ^ set(KNOWN_REFUSALS))
    for key, why in refused.items():
        assert "needs SGLang 0.5.17 or later" in why and KNOWN_REFUSALS[key] in why, (key, why)


@pytest.mark.parametrize(
    ("version", "profile_name", "arch", "layout"),
    RENDERED,
    ids=[f"{v}-{case_name(p, a, layout)}" for v, p, a, layout in RENDERED],
)
def test_profile_argv_parses(sglang_parsers, version, profile_name, arch, layout):
    argv = render(profile_name, version, arch, layout)
    output = sglang_parsers[version].output()
    name = case_name(profile_name, arch, layout)
    (result,) = [r for r in output["results"] if r["name"] == name]
    shown = " ".join(argv)

    known = set(output["options"])
    flags = [word.split("=", 1)[0] for word in argv if word.startswith("--")]
    unknown_flags = [flag for flag in flags if flag not in known]
    assert not unknown_flags and not result["unknown"], (
        f"SGLang {version}'s own parser does not know {', '.join(unknown_flags)} "
        f"(argparse left over: {result['unknown']}), rendered for profile {profile_name}: "
        f"{shown}"
    )
    assert result["ok"], (
        f"SGLang {version}'s own parser refuses the command rendered for profile "
        f"{profile_name}: {result['error']}\n  argv: {shown}"
    )

    # The values arrived as rendered: a value flag's namespace entry is its own value.
    version_number = parse_version(version)
    wrong = []
    for entry in flag_table().values():
        flag = entry.flag_in(version_number)
        if flag not in argv or entry.kind != "value" or flag == "--config":
            continue
        rendered = argv[argv.index(flag) + 1]
        problem = _check_value(flag, rendered, result["values"][result["flags"][flag]])
        if problem:
            wrong.append(problem)
    assert not wrong, f"SGLang {version} parsed {profile_name}'s command differently: {wrong}"
    # The API key reached the parser through the config file, not the command line.
    assert result["values"]["api_key"] == layout.api_key, result["merged_argv"]

    deprecated = {
        flag: output["deprecated"][flag] for flag in result["flags"] if flag in output["deprecated"]
    }
    if deprecated:
        warnings.warn(
            f"SGLang {version} accepts {profile_name}'s {', '.join(deprecated)} as deprecated "
            f"({'; '.join(result['warnings'])})",
            stacklevel=1,
        )


@pytest.mark.parametrize("version", VERSIONS)
def test_flag_table_matches_the_real_parser(sglang_parsers, version):
    """data/sglang_flags.toml's since/until against the release's parser, for every
    spelling of every intent, those no built-in profile renders included."""
    known = set(sglang_parsers[version].output()["options"])
    version_number = parse_version(version)
    missing, present = [], []
    for intent, entry in flag_table().items():
        for spelling in entry.spellings:
            if spelling.exists_in(version_number) and spelling.flag not in known:
                missing.append(f"{spelling.flag} ({intent}: {spelling.describe()})")
            if not spelling.exists_in(version_number) and spelling.flag in known:
                present.append(f"{spelling.flag} ({intent}: {spelling.describe()})")
    assert not missing, f"SGLang {version}'s parser has no {', '.join(missing)}"
    assert not present, (
        f"SGLang {version}'s parser has {', '.join(present)}, which data/sglang_flags.toml "
        "says it does not"
    )


def test_mtp_is_parsed_by_every_release_that_renders_glm5():
    """The MTP command line (GLM-5's next-token layer as the draft) goes through each pinned
    release's parser: the CASES above include it; here, that it is really rendered and its
    speculative flags stand where the flag table puts them."""
    assert MTP_PROFILES == ["glm-5-nvfp4", "glm-5-nvfp4-dense"]
    rendered = 0
    for version in VERSIONS:
        try:
            argv = render("glm-5-nvfp4", version, "sm_100", MTP_LAYOUT)
        except FlagVersionError:
            continue
        rendered += 1
        at = argv.index("--speculative-algorithm")
        assert argv[at : at + 8] == [
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ], (version, argv)
        without = render("glm-5-nvfp4", version, "sm_100", LAYOUTS[0])
        assert not [word for word in without if word.startswith("--speculative")], without
    assert rendered == len(VERSIONS)


def test_glm5_on_sm120_never_names_trtllm():
    """FlashInfer's trtllm-gen MLA runner takes SM100/103/107 only: every release either
    renders GLM-5 for sm_120 without trtllm or refuses it, naming the dense profile."""
    rendered = 0
    for version in VERSIONS:
        try:
            argv = render("glm-5-nvfp4", version, "sm_120", LAYOUTS[0])
        except FlagVersionError as error:
            assert "glm-5-nvfp4-dense" in str(error)
            continue
        rendered += 1
        assert "trtllm" not in argv, (version, argv)
    assert rendered, "no pinned release renders GLM-5 for sm_120: pin one from 0.5.17 on"


@pytest.mark.parametrize("version", VERSIONS)
def test_moe_layouts_reach_the_parser_as_meant(sglang_parsers, version):
    """The MoE layouts (issue 28) as SGLang's own parser reads them: the expert-parallel
    size, DP attention on (the switch until 0.5.21, --attn-dp-size from 0.5.22) and the
    all-to-all, in the namespace fields server_args reads."""
    assert MOE_PROFILES == ["glm-5-nvfp4", "glm-5-nvfp4-dense"]
    output = sglang_parsers[version].output()
    results = {r["name"]: r for r in output["results"]}
    new_spelling = parse_version(version) >= parse_version("0.5.22")
    checked = 0
    for arch in ARCHS["glm-5-nvfp4-dense"]:
        name = case_name("glm-5-nvfp4-dense", arch, MOE_LAYOUTS[2])
        if name not in results:
            continue  # refused for this release on this arch
        result = results[name]
        assert result["ok"], result["error"]

        def parsed(flag: str, result=result) -> Any:
            # The namespace field the flag sets (0.5.9's --ep-size sets expert_parallel_size).
            return result["values"][result["flags"][flag]]

        assert (parsed("--ep-size"), parsed("--moe-a2a-backend")) == (8, "deepep"), result
        if new_spelling:
            assert parsed("--attn-dp-size") == 8, result
            assert "--dp-size" not in result["flags"], result
        else:
            assert (parsed("--dp-size"), parsed("--enable-dp-attention")) == (8, True), result
        checked += 1
    assert checked, f"no MoE layout of glm-5-nvfp4-dense rendered for SGLang {version}"
