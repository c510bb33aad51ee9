"""What SGLang needs for a model's family beyond its size (data/model_families.toml): the
first rule naming the model's Hub id (a glob), else its architecture."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from pyinfra_sglang import data
from pyinfra_sglang.data_models import FamilyRule


def family_rule(model: str, config: Mapping[str, Any]) -> FamilyRule | None:
    """The rule for ``model`` (a Hub id or a folder) with ``config``; None: no family known."""
    architectures = set(config.get("architectures") or [])
    rules = data.model_families().rule
    by_model = (r for r in rules if any(fnmatch.fnmatch(model, glob) for glob in r.models))
    by_architecture = (r for r in rules if architectures & set(r.architectures))
    return next(by_model, None) or next(by_architecture, None)
