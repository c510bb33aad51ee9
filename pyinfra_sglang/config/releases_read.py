"""Which SGLang releases the data files were read for (data/sglang_flags.toml [versions]),
and why a release outside them is refused, or rendered anyway when the inventory accepts it
(``sglang_allow_unread_release``). The configuration refuses such a release; validation, the
CLI and the audit say the same words."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra_sglang import data
from pyinfra_sglang.versions import Version, parse_version

FLAGS_FILE = "pyinfra_sglang/data/sglang_flags.toml"
ROUTER_PINS = "pyinfra_sglang/data/python.toml [router]"
ALLOW_FIELD = "sglang_allow_unread_release"


@dataclass(frozen=True)
class UnreadRelease:
    """An SGLang release beyond what the data files were read for: ``why`` names the range,
    ``extend`` how to read the release, ``accepted`` what a deploy does with it anyway."""

    why: str
    extend: str
    accepted: str

    def refusal(self) -> str:
        return f"{self.why}. To extend it: {self.extend}; or set {ALLOW_FIELD}: {self.accepted}"

    def warning(self) -> str:
        return f"{self.why}; {ALLOW_FIELD} accepts it: {self.accepted}"


def read_releases() -> tuple[Version, Version]:
    """The oldest and newest SGLang release whose flags the table was read from."""
    versions = data.sglang_flags().versions
    return parse_version(versions.oldest_read), parse_version(versions.newest_read)


def unread_release(sglang_version: str | Version, routed: bool) -> UnreadRelease | None:
    """Why ``sglang_version`` is outside the releases read (data/sglang_flags.toml
    [versions]): the flag table's, and with a router (``routed``) the router pins'
    (router_pins_read). None inside them. A post release of the newest read is outside: it
    was not read."""
    version = parse_version(str(sglang_version))
    oldest, newest = read_releases()
    if not oldest <= version <= newest:
        side = "newer than the newest" if version > newest else "older than the oldest"
        nearest = newest if version > newest else oldest
        return UnreadRelease(
            why=(
                f"SGLang {version} is {side} release whose flags were read ({oldest} .. "
                f"{newest}, {FLAGS_FILE} [versions]): its server may spell them otherwise"
            ),
            extend=(
                "add the release to tests/compat/sglang_versions.toml, run "
                "tests/compat/test_sglang_argparse.py, fix the spellings it fails on and "
                f"widen [versions] in {FLAGS_FILE}"
            ),
            accepted=f"it renders with the spellings of {nearest}, unchecked against its parser",
        )
    pins_read = parse_version(data.sglang_flags().versions.router_pins_read)
    if routed and version > pins_read:
        newest_pin = max(data.python().router.pins, key=lambda pin: parse_version(pin.sglang))
        return UnreadRelease(
            why=(
                f"SGLang {version} is newer than the newest release the router pins were read "
                f"for ({pins_read}, router_pins_read in {FLAGS_FILE} [versions]; pins: "
                f"{ROUTER_PINS}): its gateway release may differ"
            ),
            extend=(
                f"pin the gateway release that goes with it in {ROUTER_PINS}, check its "
                "command line with tests/compat/test_smg_args.py and raise router_pins_read"
            ),
            accepted=(
                f"it runs the newest pin's gateway, {newest_pin.package} {newest_pin.router}, "
                "unchecked against that SGLang release"
            ),
        )
    return None
