"""The `pyinfra-sglang` command: offline tools that share code with the deploys."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pyinfra_sglang import inventory


def _inventory_reference(args: argparse.Namespace) -> int:
    if args.write:
        path = Path(args.write)
        path.write_text(inventory.with_reference(path.read_text()))
        return 0
    sys.stdout.write(inventory.reference_markdown())
    return 0


def _validate(args: argparse.Namespace) -> int:
    from pyinfra_cli.util import parse_cli_arg

    # Parse --data exactly as the pyinfra CLI does, so both see the same values.
    override = {key: parse_cli_arg(value) for key, value in (i.split("=", 1) for i in args.data)}
    try:
        loaded = inventory.load_inventory_file(args.inventory, override_data=override)
        configs = inventory.validate_inventory(loaded)
    except inventory.InventoryError as error:
        print(error, file=sys.stderr)
        return 1
    for name in configs:
        print(f"{name}: ok")
    return 0


def _build_plan(args: argparse.Namespace) -> int:
    from pyinfra_sglang.build_plan import BuildPlanError, plan_flash_attn_build

    archs = [a for a in args.archs.replace(";", ",").split(",") if a] if args.archs else ["90"]
    try:
        plan = plan_flash_attn_build(args.cores, args.mem_gb, archs, args.memory_fraction)
    except BuildPlanError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    print(" ".join(f"{key}={value}" for key, value in plan.env().items()))
    print(
        f"estimated peak {plan.estimated_peak_gb:.0f} GB of a {plan.bound_gb:.0f} GB bound "
        f"({plan.memory_fraction:.0%} of {plan.available_gb:g} GB available), {plan.cores} cores"
    )
    return 0


def _render_service(args: argparse.Namespace) -> int:
    from pyinfra.api.exceptions import PyinfraError

    from pyinfra_sglang import data, gpus, profiles, render

    defaults = inventory.HostConfig.model_fields
    try:
        profile = profiles.load_profile(args.profile, args.profile_dir)
        # The spec table's largest GPU of the arch gives the memory (unless given) and links.
        in_table = args.arch in gpus.known_archs()
        spec = gpus.largest_gpu_of_arch(args.arch) if in_table or args.gpu_mem_gb is None else None
        memory_gb = args.gpu_mem_gb if args.gpu_mem_gb is not None else spec.memory_gb
        pcie_only = args.pcie_only or (args.gpus > 1 and spec is not None and not spec.nvlink)
        rendered = render.render_service_files(
            profile,
            args.sglang_version,
            gpu_count=args.gpus,
            gpu_memory_gb=memory_gb,
            host=args.host or str(defaults["sglang_host"].default),
            port=args.port or defaults["sglang_port"].default,
            venv_path=args.venv or data.load("python")["venv"]["path"],
            api_key="(set)",
            hf_token="(set)",
            pcie_only=pcie_only,
            arch=args.arch,
            mask=True,
        )
    except PyinfraError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    gpu = f"{spec.name}, the largest {args.arch} GPU known" if args.gpu_mem_gb is None else "given"
    print(
        f"# profile {profile.name}, SGLang {args.sglang_version}, {args.gpus} x {memory_gb:g} GB "
        f"{args.arch} ({gpu}), PCIe only: {'yes' if pcie_only else 'no'}; secrets masked"
    )
    for file in rendered:
        print(f"\n# ==> {file.path} (mode {file.mode}) <==")
        sys.stdout.write(file.content)
    return 0


def _arch(text: str) -> str:
    if not re.match(r"^sm_\d{2,3}$", text):
        raise argparse.ArgumentTypeError(f"not a CUDA architecture: {text!r} (e.g. sm_90, sm_120)")
    return text


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return int(text)


def _release(text: str) -> str:
    from pyinfra_sglang.versions import parse_version

    try:
        return str(parse_version(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyinfra-sglang", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    reference = commands.add_parser(
        "inventory-reference", help="print the inventory fields as a Markdown table"
    )
    reference.add_argument(
        "--write", metavar="README", help="update the reference block in this file instead"
    )
    reference.set_defaults(func=_inventory_reference)

    validate = commands.add_parser(
        "validate", help="validate an inventory's host and group data without connecting"
    )
    validate.add_argument("inventory", help="inventory file, as given to pyinfra")
    validate.add_argument(
        "--data", action="append", default=[], metavar="KEY=VALUE",
        help="override data, as pyinfra's --data",
    )  # fmt: skip
    validate.set_defaults(func=_validate)

    plan = commands.add_parser(
        "build-plan", help="print the flash-attn build plan for a host size, touching no host"
    )
    plan.add_argument("--cores", type=int, required=True, help="CPU cores of the build host")
    plan.add_argument("--mem-gb", type=float, required=True, help="available memory, GB")
    plan.add_argument(
        "--archs", help="CUDA architectures, e.g. 90 or 90,120 (default: 90)"
    )
    plan.add_argument(
        "--memory-fraction", type=float, default=None,
        help="share of available memory the build may use (default from data/python.toml)",
    )  # fmt: skip
    plan.set_defaults(func=_build_plan)

    service = commands.add_parser(
        "render",
        help="print the SGLang unit, env file and config file for a profile, touching no host",
    )
    service.add_argument("--profile", required=True, help="model profile, e.g. glm-5-nvfp4")
    service.add_argument("--gpus", type=_positive, required=True, help="GPUs per host")
    service.add_argument("--arch", type=_arch, required=True, help="GPU architecture, e.g. sm_120")
    service.add_argument(
        "--sglang-version", type=_release, required=True, help="SGLang release, e.g. 0.5.23"
    )
    service.add_argument(
        "--gpu-mem-gb", type=float, default=None,
        help="memory per GPU, GB (default: the largest GPU of --arch in data/gpus.toml)",
    )  # fmt: skip
    service.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    service.add_argument("--port", type=int, default=None, help="port (default 30000)")
    service.add_argument("--venv", default=None, help="virtualenv on the host")
    service.add_argument(
        "--profile-dir", action="append", default=[], metavar="DIR",
        help="folder of your own profiles, searched before the built-in ones (repeatable)",
    )  # fmt: skip
    service.add_argument(
        "--pcie-only", action="store_true",
        help="add the NCCL hints for PCIe-only GPUs (default: when the GPU has no NVLink)",
    )  # fmt: skip
    service.set_defaults(func=_render_service)

    from checks import decode  # standard library only: cheap to import

    check = commands.add_parser(
        "decode-check", help="ask a running SGLang server a question whose answer is known"
    )
    decode.add_arguments(check)
    check.set_defaults(func=decode.run)

    from checks import ab, analyze, diagnose

    analyze.register(commands)
    diagnose.register(commands)
    ab.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
