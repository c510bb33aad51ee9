"""The search space: data/tuning.toml, narrowed to what applies to one host."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pyinfra_sglang import data
from pyinfra_sglang.versions import parse_version


@dataclass(frozen=True)
class Setting:
    """One profile field the tuner varies. ``requires``: other fields' values it only makes
    sense with (a graph batch size needs CUDA graphs on); ``min_sglang_version`` and ``archs``
    (CUDA architectures such as ``sm_90``): where it applies at all; ``profile_fields``: the
    profile must set these (expert parallelism needs a model with routed experts);
    ``divides_gpus``: only values that divide the host's GPU count (a parallel size)."""

    name: str
    values: tuple[Any, ...]
    requires: dict[str, Any] = field(default_factory=dict)
    min_sglang_version: str | None = None
    archs: tuple[str, ...] = ()
    profile_fields: tuple[str, ...] = ()
    divides_gpus: bool = False

    def applies(self, sglang_version: str, arch: str) -> bool:
        if self.min_sglang_version and parse_version(sglang_version) < parse_version(
            self.min_sglang_version
        ):
            return False
        return not self.archs or arch in self.archs

    def allowed_with(self, settings: dict[str, Any]) -> bool:
        return all(settings.get(name) == value for name, value in self.requires.items())


@dataclass(frozen=True)
class Space:
    settings: tuple[Setting, ...]  # in search order
    max_rounds: int
    # A server verdict -> the settings to try first when the baseline's diagnosis names it.
    binds_first: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def order_for(self, diagnosis: str | None) -> tuple[Setting, ...]:
        """The search order after a baseline diagnosed ``diagnosis``: the settings that move
        a server limit it names first (data/tuning.toml ``binds_first``), the rest as
        ordered. A pure function of the journaled diagnosis: a resumed search agrees."""
        first: list[str] = []
        for verdict, names in self.binds_first:
            if diagnosis and verdict in diagnosis:
                first += [n for n in names if n not in first]
        moved = [s for name in first for s in self.settings if s.name == name]
        return (*moved, *(s for s in self.settings if s not in moved))

    def names(self) -> list[str]:
        return [s.name for s in self.settings]

    def digest(self) -> list[dict[str, Any]]:
        """What the journal records of the space: a search resumes only on the same one."""
        return [{"name": s.name, "values": list(s.values)} for s in self.settings]


def load_space(table: dict | None = None) -> Space:
    """The space of ``table`` (data/tuning.toml by default), in its search order; ValueError
    for an order that names a setting without values or leaves one out."""
    table = table if table is not None else data.load("tuning")
    search, declared = table["search"], table["settings"]
    order = list(search["order"])
    if sorted(order) != sorted(declared) or len(set(order)) != len(order):
        raise ValueError(
            f"tuning: [search] order {order} must name each of [settings] once: {sorted(declared)}"
        )
    settings = []
    for name in order:
        spec = declared[name]
        if not spec.get("values"):
            raise ValueError(f"tuning: settings.{name} has no values")
        settings.append(
            Setting(
                name=name,
                values=tuple(spec["values"]),
                requires=dict(spec.get("requires", {})),
                min_sglang_version=spec.get("min_sglang_version"),
                archs=tuple(spec.get("archs", ())),
                profile_fields=tuple(spec.get("profile_fields", ())),
                divides_gpus=bool(spec.get("divides_gpus", False)),
            )
        )
    binds = {verdict: tuple(names) for verdict, names in search.get("binds_first", {}).items()}
    unknown = sorted({n for names in binds.values() for n in names} - set(order))
    if unknown:
        raise ValueError(f"tuning: [search] binds_first names no setting of [settings]: {unknown}")
    return Space(tuple(settings), int(search["max_rounds"]), tuple(sorted(binds.items())))


def applicable(
    space: Space,
    sglang_version: str,
    arch: str,
    only: list[str] | None = None,
    profile: Any = None,
    gpu_count: int | None = None,
) -> Space:
    """The settings that apply to this SGLang release and GPU architecture, narrowed to
    ``only`` (names) when given; ValueError naming an unknown one. With ``profile``, those
    whose ``profile_fields`` it sets; with ``gpu_count``, a parallel size's values that
    divide it (a setting left with none is dropped)."""
    if only is not None:
        unknown = sorted(set(only) - set(space.names()))
        if unknown:
            raise ValueError(f"unknown tuning settings {unknown}; allowed: {space.names()}")
    kept = []
    for s in space.settings:
        if not s.applies(sglang_version, arch) or (only is not None and s.name not in only):
            continue
        if profile is not None and any(getattr(profile, f, None) is None for f in s.profile_fields):
            continue
        if s.divides_gpus and gpu_count:
            s = replace(s, values=tuple(v for v in s.values if gpu_count % v == 0))
        if s.values:
            kept.append(s)
    return Space(tuple(kept), space.max_rounds, space.binds_first)
