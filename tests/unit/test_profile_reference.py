"""docs/profiles.md's generated reference: every key a profile file takes is described,
and the keys read from a model's files are keys of a profile."""

from __future__ import annotations

from pyinfra_sglang.docgen.profile_reference import NOT_KEYS, profile_reference_markdown
from pyinfra_sglang.model_shape.profile_values import IDENTITY_FIELDS, SIZE_FIELDS
from pyinfra_sglang.serving.profiles import Profile


def test_every_key_is_described_in_the_reference():
    table = profile_reference_markdown()
    for name, info in Profile.model_fields.items():
        if name in NOT_KEYS:
            continue
        assert info.description, name
        assert f"| `{name}` |" in table


def test_the_keys_read_from_a_models_files_are_profile_keys_marked_as_read():
    table = profile_reference_markdown()
    for names, mark in ((SIZE_FIELDS, "| size |"), (IDENTITY_FIELDS, "| identity |")):
        for name in names:
            assert name in Profile.model_fields
            [row] = [line for line in table.splitlines() if line.startswith(f"| `{name}` |")]
            assert mark in row
