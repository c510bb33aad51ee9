"""The search space: data/tuning.toml, narrowed to what applies to one host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyinfra_sglang import data
from pyinfra_sglang.data_models import Tuning, TuningSetting


@dataclass(frozen=True)
class Space:
    settings: tuple[TuningSetting, ...]  # in search order
    max_rounds: int
    # A server verdict -> the settings to try first when the baseline's diagnosis names it.
    binds_first: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def order_for(self, diagnosis: str | None) -> tuple[TuningSetting, ...]:
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
    """The space of ``table`` (its [search] and [settings]; data/tuning.toml by default), in
    its search order; ValueError for an order that names a setting without values or leaves
    one out."""
    if table is None:
        tuning = data.tuning()
    else:
        tuning = Tuning.model_validate({"search": table["search"], "settings": table["settings"]})
    search, declared = tuning.search, tuning.settings
    order = list(search.order)
    if sorted(order) != sorted(declared) or len(set(order)) != len(order):
        raise ValueError(
            f"tuning: [search] order {order} must name each of [settings] once: {sorted(declared)}"
        )
    settings = []
    for name in order:
        if not declared[name].values:
            raise ValueError(f"tuning: settings.{name} has no values")
        settings.append(declared[name])
    binds = dict(search.binds_first)
    unknown = sorted({n for names in binds.values() for n in names} - set(order))
    if unknown:
        raise ValueError(f"tuning: [search] binds_first names no setting of [settings]: {unknown}")
    return Space(tuple(settings), search.max_rounds, tuple(sorted(binds.items())))


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
            s = s.model_copy(update={"values": tuple(v for v in s.values if gpu_count % v == 0)})
        if s.values:
            kept.append(s)
    return Space(tuple(kept), space.max_rounds, space.binds_first)
