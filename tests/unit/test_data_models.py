"""The data files' models (pyinfra_sglang/data_models/, one module per file) and the
references between files.

Each model checks one file; the checks here hold across files (a platform's driver family has
package tables in nvidia.toml, a profile's architecture is in gpus.toml...). Every check runs
on the shipped data (no problem) and on a copy mutated to break it (the problem named), so
none can pass by reading nothing.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import pytest

from pyinfra_sglang import data
from pyinfra_sglang import data_models as m
from pyinfra_sglang.arch import Arch, ArchError
from pyinfra_sglang.driver.driver_plan import HEADER_EXAMPLES
from pyinfra_sglang.serving.profiles import Profile, available_profiles, load_profile
from pyinfra_sglang.serving.render import _intent_values


@dataclass(frozen=True)
class Data:
    """Every data file as its model, and the built-in profiles."""

    files: dict[str, Any]
    profiles: tuple[Profile, ...]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.files[name]
        except KeyError:
            raise AttributeError(name) from None


def raw_tables(name: str) -> dict[str, Any]:
    """Data file ``name`` as TOML tables, unvalidated: what the mutations below break."""
    text = files("pyinfra_sglang").joinpath("data", f"{name}.toml").read_text()
    return tomllib.loads(text)


def shipped(
    mutate: dict[str, Callable[[dict], None]] | None = None,
    profiles: Callable[[list[Profile]], list[Profile]] | None = None,
) -> Data:
    """The shipped data, each file passed through ``mutate[name]`` (on a copy) first."""
    models = {}
    for name in m.MODELS:
        raw = raw_tables(name)
        if mutate and name in mutate:
            mutate[name](raw)
        models[name] = data.validate(name, raw)
    models["gpus"] = models["gpus"].root
    loaded = [load_profile(name) for name in available_profiles()]
    return Data(models, tuple(profiles(loaded) if profiles else loaded))


def _gpu_archs(d: Data) -> set[str]:
    return {gpu.arch for gpu in d.gpus.values()}


def _per_arch(profile: Profile) -> list[tuple[str | None, Profile]]:
    """The profile as it runs on each arch it has a table for, and as it is."""
    return [(None, profile)] + [(arch, profile.for_arch(arch)) for arch in profile.arch]


# --- the cross-file checks ----------------------------------------------------------------


def platform_families_have_tables(d: Data) -> list[str]:
    """platforms.toml driver_family -> nvidia.toml's package, module and MOK tables."""
    tables = {
        "nvidia.toml driver.packages": d.nvidia.driver.packages,
        "nvidia.toml driver.kernel_module_packages": d.nvidia.driver.kernel_module_packages,
        "nvidia.toml secure_boot.mok": d.nvidia.secure_boot.mok,
        "driver_plan.HEADER_EXAMPLES": HEADER_EXAMPLES,
    }
    return [
        f"platform {p.id} {p.version}: family {p.driver_family} has no {where}"
        for p in d.platforms.platform
        for where, table in tables.items()
        if p.driver_family not in table
    ]


def profile_archs_are_gpus(d: Data) -> list[str]:
    """Every architecture a profile names (archs, [arch.*] tables) is some GPU's in gpus.toml."""
    known = _gpu_archs(d)
    return [
        f"profile {p.name}: {arch} is no GPU's architecture in gpus.toml"
        for p in d.profiles
        for arch in sorted({*(p.archs or ()), *p.arch})
        if arch not in known
    ]


def profile_intents_have_flags(d: Data) -> list[str]:
    """Every intent render computes for a profile has a [[flag]] with a spelling, and every
    [[flag]] gets a value (a flag no profile field or render table fills would be dead)."""
    flags = {f.intent: f for f in d.sglang_flags.flag}
    problems = []
    for p in d.profiles:
        rendered = set(_intent_values(p, 1, "127.0.0.1", 30000, None, 1, 0, None))
        problems += [
            f"profile {p.name}: intent {i} has no [[flag]] in sglang_flags.toml"
            for i in sorted(rendered - set(flags))
        ]
        problems += [
            f"sglang_flags.toml: intent {i} is neither a profile field nor in render's table"
            for i in sorted(set(flags) - rendered)
        ]
    problems += [
        f"sglang_flags.toml: intent {f.intent} has no spelling"
        for f in flags.values()
        if not f.spellings
    ]
    return sorted(set(problems))


def profile_backends_are_known(d: Data) -> list[str]:
    """A sparse-attention backend a profile names is in attention_backends.toml, runs on the
    arch it is named for, and takes the KV cache dtype the profile sets there."""
    sparse = d.attention_backends.sparse
    problems = []
    for p in d.profiles:
        for arch, view in _per_arch(p):
            for phase in ("prefill", "decode"):
                name = getattr(view, f"sparse_attention_{phase}_backend")
                if name is None:
                    continue
                where = f"profile {p.name}" + (f" [arch.{arch}]" if arch else "")
                backend = sparse.get(name)
                if backend is None:
                    problems.append(f"{where}: {name} is no backend of attention_backends.toml")
                    continue
                if arch and arch not in backend.archs:
                    problems.append(f"{where}: {name} has no kernels for {arch}")
                if phase not in backend.phases:
                    problems.append(f"{where}: {name} is no {phase} backend")
                if backend.kv_cache_dtypes and view.kv_cache_dtype not in backend.kv_cache_dtypes:
                    problems.append(f"{where}: {name} takes no {view.kv_cache_dtype} KV cache")
    return problems


def backend_archs_are_gpus(d: Data) -> list[str]:
    """attention_backends.toml names architectures, not typos: each is of a CUDA generation
    some GPU of gpus.toml has (sm_103 beside sm_100). parallelism.toml's ep_one_or_all may
    name sm_110 (Thor), which no served GPU of the table is."""
    majors = {Arch.parse(a).number // 10 for a in _gpu_archs(d)}
    return [
        f"attention_backends.toml sparse.{name}: {arch} is of no GPU generation in gpus.toml"
        for name, backend in d.attention_backends.sparse.items()
        for arch in backend.archs
        if Arch.parse(arch).number // 10 not in majors
    ]


def profile_a2a_backends_are_choices(d: Data) -> list[str]:
    """A profile's moe_a2a_backend is among parallelism.toml's choices of some release."""
    choices = {b for c in d.parallelism.a2a.choices for b in c.backends}
    problems = [
        f"parallelism.toml a2a.not_nvidia: {b} is in no release's choices"
        for b in d.parallelism.a2a.not_nvidia
        if b not in choices
    ]
    return problems + [
        f"profile {p.name}: moe_a2a_backend {p.moe_a2a_backend} is in no release's choices"
        for p in d.profiles
        if p.moe_a2a_backend is not None and p.moe_a2a_backend not in choices
    ]


def tuning_settings_are_profile_fields(d: Data) -> list[str]:
    fields = set(Profile.model_fields)
    settings = d.tuning.settings
    problems = [
        f"tuning.toml search.order: {n} has no [settings.{n}]"
        for n in d.tuning.search.order
        if n not in settings
    ]
    problems += [
        f"tuning.toml [settings.{n}] is not in search.order"
        for n in settings
        if n not in d.tuning.search.order
    ]
    for name, setting in settings.items():
        problems += [f"tuning.toml settings.{name}: {name} is no profile field"] * (
            name not in fields
        )
        problems += [
            f"tuning.toml settings.{name}.profile_fields: {f} is no profile field"
            for f in setting.profile_fields
            if f not in fields
        ]
        problems += [
            f"tuning.toml settings.{name}.requires: {r} is no setting"
            for r in setting.requires
            if r not in settings
        ]
    return problems


def cuda_versions_are_covered(d: Data) -> list[str]:
    """Each CUDA version the inventory may pick has a PyTorch wheel tag, driver minimums and
    a minor-version floor; the defaults are among the choices."""
    nvidia, problems = d.nvidia, []
    if nvidia.default_cuda_version not in nvidia.cuda_versions:
        problems.append(f"nvidia.toml default_cuda_version {nvidia.default_cuda_version}")
    minimums = {row.release for row in nvidia.cuda_driver_minimum}
    for version in nvidia.cuda_versions:
        if version not in d.python.torch.cuda_tag:
            problems.append(f"python.toml torch.cuda_tag has no CUDA {version}")
        if version not in minimums:
            problems.append(f"nvidia.toml cuda_driver_minimum has no row for CUDA {version}")
        if version.split(".")[0] not in nvidia.cuda_minor_version_compat:
            problems.append(f"nvidia.toml cuda_minor_version_compat has no CUDA {version}")
    return problems


def driver_branches_are_described(d: Data) -> list[str]:
    nvidia = d.nvidia
    problems = []
    if nvidia.default_driver_branch not in nvidia.driver_branches:
        problems.append(f"nvidia.toml default_driver_branch {nvidia.default_driver_branch}")
    # The installable branches are read from branch_support: a branch is described once.
    rows = [row.branch for row in nvidia.branch_support]
    problems += [
        f"nvidia.toml branch_support describes branch {b} twice"
        for b in sorted({b for b in rows if rows.count(b) > 1})
    ]
    return problems


def driver_packages_have_sources(d: Data) -> list[str]:
    """Every package name the driver role may install has its source in driver.sources
    (driver_plan's `packages` output prints it)."""
    driver = d.nvidia.driver
    names = {driver.pinning_package, driver.version_pinning_package}
    for tables in [
        *(installs.of(i) for installs in driver.packages.values() for i in ("compute", "full")),
        *driver.kernel_module_packages.values(),
    ]:
        for flavor in ("open", "proprietary"):
            for entry in tables.of(flavor):
                names.update([entry] if isinstance(entry, str) else entry)
    return [f"nvidia.toml driver.sources has no {n}" for n in sorted(names - set(driver.sources))]


def router_pins_have_gateways(d: Data) -> list[str]:
    gateways = d.sglang_service.router.gateway
    return [
        f"python.toml router.pins: SGLang {pin.sglang}'s {pin.package} has no "
        f"sglang_service.toml [router.gateway.{pin.package}]"
        for pin in d.python.router.pins
        if pin.package not in gateways
    ]


def nccl_levels_are_allowed(d: Data) -> list[str]:
    env = d.sglang_service.environment
    allowed = env.nccl_p2p.allowed.get("NCCL_P2P_LEVEL", ())
    levels = {"default": env.nccl_p2p_level.default, **env.nccl_p2p_level.by_path}
    return [
        f"sglang_service.toml nccl_p2p_level.{k} = {v} is not an allowed NCCL_P2P_LEVEL"
        for k, v in levels.items()
        if v not in allowed
    ]


def build_archs_are_archs(d: Data) -> list[str]:
    problems = []
    for arch in d.python.flash_attn.default_cuda_archs:
        try:
            Arch.parse(arch)
        except ArchError:
            problems.append(f"python.toml flash_attn.default_cuda_archs: {arch!r}")
    return problems


CHECKS = [
    platform_families_have_tables,
    profile_archs_are_gpus,
    profile_intents_have_flags,
    profile_backends_are_known,
    backend_archs_are_gpus,
    profile_a2a_backends_are_choices,
    tuning_settings_are_profile_fields,
    cuda_versions_are_covered,
    driver_branches_are_described,
    driver_packages_have_sources,
    router_pins_have_gateways,
    nccl_levels_are_allowed,
    build_archs_are_archs,
]


@pytest.fixture(scope="module")
def real() -> Data:
    return shipped()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_shipped_data_holds_together(real: Data, check) -> None:
    assert check(real) == []


def _with_platform(raw: dict) -> None:
    raw["platform"].append(
        {
            "id": "fedora",
            "version": "41",
            "nvidia_repo": "fedora41",
            "components": [],
            "driver_family": "fedora",
        }
    )


def _drop_gpu_arch(raw: dict) -> None:
    for name in [n for n, gpu in raw.items() if gpu["arch"] == "sm_120"]:
        del raw[name]


def _drop_flag(intent: str) -> Callable[[dict], None]:
    def mutate(raw: dict) -> None:
        raw["flag"] = [f for f in raw["flag"] if f["intent"] != intent]

    return mutate


def _add_flag(raw: dict) -> None:
    raw["flag"].append({"intent": "enable_lora", "kind": "switch", "spellings": []})


def _sm120_backend_elsewhere(raw: dict) -> None:
    raw["sparse"]["flashinfer_sparse_mla"]["archs"] = ["sm_100"]


def _rename_profile_backend(profiles: list[Profile]) -> list[Profile]:
    return [p.model_copy(update={"sparse_attention_decode_backend": "nsa_magic"}) for p in profiles]


def _profile_on_unknown_arch(profiles: list[Profile]) -> list[Profile]:
    return [p.model_copy(update={"archs": [*(p.archs or ()), "sm_75"]}) for p in profiles]


def _profile_a2a(profiles: list[Profile]) -> list[Profile]:
    return [p.model_copy(update={"moe_a2a_backend": "carrier_pigeon"}) for p in profiles]


def _set(path: str, value: Any) -> Callable[[dict], None]:
    *parents, key = path.split(".")

    def mutate(raw: dict) -> None:
        target = raw
        for part in parents:
            target = target[part]
        target[key] = value

    return mutate


def _drop(path: str) -> Callable[[dict], None]:
    *parents, key = path.split(".")

    def mutate(raw: dict) -> None:
        target = raw
        for part in parents:
            target = target[part]
        del target[key]

    return mutate


def _no_smg_gateway(raw: dict) -> None:
    del raw["router"]["gateway"]["smg"]


# (check, file mutations, profile mutation, text the problem names)
BROKEN = [
    (platform_families_have_tables, {"platforms": _with_platform}, None, "family fedora"),
    (profile_archs_are_gpus, {"gpus": _drop_gpu_arch}, None, "sm_120"),
    (profile_archs_are_gpus, {}, _profile_on_unknown_arch, "sm_75"),
    (
        profile_intents_have_flags,
        {"sglang_flags": _drop_flag("watchdog_timeout")},
        None,
        "watchdog_timeout",
    ),
    (
        profile_intents_have_flags,
        {"sglang_flags": _drop_flag("kv_cache_dtype")},
        None,
        "kv_cache_dtype",
    ),
    (profile_intents_have_flags, {"sglang_flags": _add_flag}, None, "enable_lora"),
    (
        profile_backends_are_known,
        {"attention_backends": _sm120_backend_elsewhere},
        None,
        "no kernels for sm_120",
    ),
    (profile_backends_are_known, {}, _rename_profile_backend, "nsa_magic"),
    (
        profile_backends_are_known,
        {"attention_backends": _set("sparse.trtllm.kv_cache_dtypes", ["bf16"])},
        None,
        "no fp8_e4m3 KV cache",
    ),
    (
        profile_backends_are_known,
        {"attention_backends": _set("sparse.trtllm.phases", ["prefill"])},
        None,
        "no decode backend",
    ),
    (
        backend_archs_are_gpus,
        {"attention_backends": _set("sparse.fa3.archs", ["sm_70"])},
        None,
        "sm_70",
    ),
    (profile_a2a_backends_are_choices, {}, _profile_a2a, "carrier_pigeon"),
    (
        profile_a2a_backends_are_choices,
        {"parallelism": _set("a2a.not_nvidia", ["ascend_tp", "ascend_xx"])},
        None,
        "ascend_xx",
    ),
    (
        tuning_settings_are_profile_fields,
        {"tuning": _set("settings.cuda_graph_max_bs.requires", {"cuda_graphs": True})},
        None,
        "cuda_graphs",
    ),
    (
        tuning_settings_are_profile_fields,
        {"tuning": _set("settings.ep_size.profile_fields", ["num_experts"])},
        None,
        "num_experts",
    ),
    (
        tuning_settings_are_profile_fields,
        {"tuning": _drop("settings.schedule_policy")},
        None,
        "schedule_policy",
    ),
    (
        cuda_versions_are_covered,
        {"python": lambda raw: raw["torch"]["cuda_tag"].pop("13.0")},
        None,
        "cuda_tag has no CUDA 13.0",
    ),
    (cuda_versions_are_covered, {"nvidia": _set("default_cuda_version", "12.6")}, None, "12.6"),
    (driver_branches_are_described, {"nvidia": _set("default_driver_branch", 600)}, None, "600"),
    (
        driver_branches_are_described,
        {"nvidia": lambda raw: raw["branch_support"].append(dict(raw["branch_support"][-1]))},
        None,
        "branch 620 twice",
    ),
    (
        driver_packages_have_sources,
        {"nvidia": _drop("driver.sources.nvidia-utils")},
        None,
        "nvidia-utils",
    ),
    (router_pins_have_gateways, {"sglang_service": _no_smg_gateway}, None, "smg"),
    (
        nccl_levels_are_allowed,
        {"sglang_service": _set("environment.nccl_p2p_level.by_path.SYS", "FAR")},
        None,
        "FAR",
    ),
    (
        build_archs_are_archs,
        {"python": _set("flash_attn.default_cuda_archs", ["90", "hopper"])},
        None,
        "hopper",
    ),
]


def test_every_check_has_a_mutation_that_breaks_it() -> None:
    assert {c for c, *_ in BROKEN} == set(CHECKS)


@pytest.mark.parametrize(
    ("check", "mutate", "profiles", "named"),
    BROKEN,
    ids=[f"{c.__name__}-{named}" for c, _, _, named in BROKEN],
)
def test_each_check_fails_on_data_broken_for_it(check, mutate, profiles, named) -> None:
    problems = check(shipped(mutate, profiles))
    assert problems, "the check passed broken data"
    assert any(named in problem for problem in problems), problems


# --- the models: loaded once, malformed files named -------------------------------------


def test_every_data_file_has_a_model_and_every_model_a_file() -> None:
    on_disk = {
        item.name.removesuffix(".toml")
        for item in files("pyinfra_sglang").joinpath("data").iterdir()
        if item.name.endswith(".toml")
    }
    assert on_disk == set(m.MODELS)


def test_accessors_return_the_one_validated_model() -> None:
    assert data.nvidia() is data.nvidia()
    assert isinstance(data.nvidia(), m.Nvidia)
    assert data.gpus()["NVIDIA L40S"].arch == "sm_89"
    assert data.pcie().generations[5].transfer_rate_gts == 32.0
    assert not hasattr(data, "load")  # no raw tables: every reader goes through a model


def test_the_mirrors_are_the_data_models() -> None:
    """One type per data file: the GPU table, the flag table and the tuning space hand out
    the validated model instances, named by their keys."""
    from pyinfra_sglang.gpus import all_gpus
    from pyinfra_sglang.serving.sglang_flags import flag_table
    from pyinfra_sglang.tuning.space import load_space
    from pyinfra_sglang.versions import parse_version

    h200 = all_gpus()["NVIDIA H200"]
    assert h200 is data.gpus()["NVIDIA H200"] and h200.name == "NVIDIA H200"
    assert list(flag_table().values()) == list(data.sglang_flags().flag)
    assert flag_table()["cuda_graph_max_bs"].flag_in(parse_version("0.5.9")) is not None
    space = load_space()
    assert [s.name for s in space.settings] == list(data.tuning().search.order)
    assert all(s is data.tuning().settings[s.name] for s in space.settings)


@pytest.mark.parametrize(
    ("name", "mutate", "named"),
    [
        ("nvidia", _drop("repo.base_url"), "repo.base_url: Field required"),
        ("nvidia", _set("repo.base_ulr", "x"), "repo.base_ulr: Extra inputs are not permitted"),
        ("nvidia", _set("driver.packages.debian.compute.open", 5), "driver.packages.debian"),
        ("platforms", _set("base.packages", "curl"), "base.packages"),
        ("gpus", _set("NVIDIA L40S.arch", "sm_89a"), "NVIDIA L40S.arch"),
        ("gpus", _set("NVIDIA L40S.arch", "ada"), "not a GPU architecture"),
        ("gpus", _set("NVIDIA L40S.name", "NVIDIA L4"), "'NVIDIA L4' is not the table's key"),
        ("tuning", _set("settings.cuda_graph.name", "graphs"), "cuda_graph: name 'graphs'"),
        ("tuning", _set("settings.cuda_graph.valuse", [1]), "settings.cuda_graph.valuse"),
        ("sglang_flags", lambda raw: raw["flag"][0].update(kind="toggle"), "flag.0.kind"),
        (
            "sglang_flags",
            lambda raw: raw["flag"].append(copy.deepcopy(raw["flag"][0])),
            "intents listed twice: model_path",
        ),
        ("sglang_flags", _set("versions.newest_read", "latest"), "versions.newest_read"),
        ("pcie", _set("5.encoding", 128), "generations.5.encoding"),
        ("report", lambda raw: raw["panel"][0]["series"][0].pop("field"), "panel.0.series.0"),
        (
            "python",
            _set("router.pins", [{"sglang": "0.5.5", "package": "smg"}]),
            "router.pins.0.router",
        ),
    ],
)
def test_a_malformed_file_is_refused_naming_file_and_key(name, mutate, named) -> None:
    raw = raw_tables(name)
    mutate(raw)
    with pytest.raises(data.DataError) as refused:
        data.validate(name, raw)
    message = str(refused.value)
    assert message.startswith(f"pyinfra_sglang/data/{name}.toml: ")
    assert named in message
