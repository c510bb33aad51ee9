"""Benchmarks, A/B runs and the tuner (deploy/bench.py, ab.py, tune.py)."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import BeforeValidator, Field, StrictBool, model_validator

from pyinfra_sglang import data
from pyinfra_sglang.config.types import (
    FieldGroup,
    allowed,
    field_error,
    no_bool,
)


class BenchFields(FieldGroup):
    """Benchmarks, A/B runs and the tuner."""

    bench_concurrencies: Annotated[
        list[Annotated[int, BeforeValidator(no_bool), Field(ge=1, le=4096)]],
        Field(min_length=1),
    ] = Field(
        default_factory=lambda: [1, 8, 32],
        description=(
            "Concurrent requests deploy/bench.py measures, one benchmark each "
            "(`--max-concurrency`)."
        ),
        json_schema_extra=allowed("a non-empty list of 1..4096, such as [1, 8, 32]"),
    )

    bench_input_len: Annotated[int, BeforeValidator(no_bool)] = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Prompt tokens of every benchmark request (`--random-input-len`).",
        json_schema_extra=allowed("1..1000000"),
    )

    bench_output_len: Annotated[int, BeforeValidator(no_bool)] = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Generated tokens of every benchmark request (`--random-output-len`).",
        json_schema_extra=allowed("1..1000000"),
    )

    bench_prompts_per_concurrency: Annotated[int, BeforeValidator(no_bool)] = Field(
        4,
        ge=1,
        le=1000,
        description=(
            "Requests per benchmark as a multiple of its concurrency (4: 32 requests at "
            "concurrency 8), at least 8."
        ),
        json_schema_extra=allowed("1..1000"),
    )

    bench_repeat: Annotated[int, BeforeValidator(no_bool)] = Field(
        1,
        ge=1,
        le=100,
        description="Times each concurrency is measured in one run (for the spread A/B compares).",
        json_schema_extra=allowed("1..100"),
    )

    bench_regression_pct: Annotated[float, BeforeValidator(no_bool)] = Field(
        10.0,
        gt=0,
        le=100,
        description=(
            "Output throughput drop (%) against the last run of the same settings that "
            "fails the host."
        ),
        json_schema_extra=allowed("above 0, at most 100"),
    )

    bench_results_dir: Annotated[str, Field(min_length=1)] = Field(
        "results",
        description=(
            "Folder on the controller where deploy/bench.py writes `<host>/<UTC timestamp>/`."
        ),
        json_schema_extra=allowed("a path, relative to where pyinfra runs or absolute"),
    )

    bench_ab_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Profile settings side B of deploy/ab.py serves with (side A: the inventory's own), "
            'e.g. `{"cuda_graph": false}` (CUDA graphs off).'
        ),
        json_schema_extra=allowed("profile fields, as in sglang_profile_overrides"),
    )

    tune_settings: list[str] | None = Field(
        None,
        min_length=1,  # [] would search nothing: unset means every setting
        description=(
            "Settings deploy/tune.py searches, in data/tuning.toml's order (unset: every one "
            "that applies to the host's SGLang release and GPUs)."
        ),
        json_schema_extra=allowed("names of data/tuning.toml [settings]"),
    )

    tune_budget_s: Annotated[int, BeforeValidator(no_bool)] = Field(
        7200,
        ge=600,
        le=7 * 86400,
        description=(
            "Seconds deploy/tune.py may search a host; refused up front when one trial (the "
            "profile's start timeout) cannot fit. A trial about to overrun it is not started."
        ),
        json_schema_extra=allowed("600..604800"),
    )

    tune_concurrency: Annotated[int | None, BeforeValidator(no_bool)] = Field(
        None,
        description=(
            "Concurrency whose output throughput deploy/tune.py maximizes (unset: the largest of "
            "bench_concurrencies)."
        ),
        json_schema_extra=allowed("one of bench_concurrencies"),
    )

    tune_max_tpot_ms: float | None = Field(
        None,
        gt=0,
        le=60000,
        description="Latency limit of the tuner: settings whose median TPOT exceeds it lose.",
        json_schema_extra=allowed("milliseconds, > 0"),
    )

    tune_max_ttft_ms: float | None = Field(
        None,
        gt=0,
        le=3600000,
        description="Latency limit of the tuner: settings whose median TTFT exceeds it lose.",
        json_schema_extra=allowed("milliseconds, > 0"),
    )

    tune_keep: StrictBool = Field(
        True,
        description=(
            "Leave the host on the tuner's winner (false: back on its starting settings, the "
            "inventory's own)."
        ),
        json_schema_extra=allowed("true, false"),
    )

    @model_validator(mode="after")
    def _tuner_settings(self) -> Self:
        # The tuner's settings by name, from its data file (the tuner sits above the model).
        known = list(data.tuning().settings)
        unknown = [name for name in self.tune_settings or [] if name not in known]
        if unknown:
            raise field_error(
                "tune_settings", f"unknown settings {unknown}; allowed: {', '.join(known)}"
            )
        if self.tune_concurrency is not None and self.tune_concurrency not in (
            self.bench_concurrencies
        ):
            raise field_error(
                "tune_concurrency",
                f"{self.tune_concurrency} is not measured; allowed: one of bench_concurrencies "
                f"{list(self.bench_concurrencies)}",
            )
        tuning = self.tune_settings is not None or self.tune_concurrency is not None
        if tuning and self.bench_repeat < 2:
            # What deploy/tune.py refuses (roles/tuner.py), said by validate for a host whose
            # inventory asks for a search.
            raise field_error(
                "bench_repeat",
                f"{self.bench_repeat} with tune_settings or tune_concurrency set: one run a "
                "trial shows no spread, so deploy/tune.py cannot tell a gain from noise; "
                "allowed: 2..100 for a host that is tuned",
            )
        return self
