"""`pyinfra-sglang plan`: the fit of a model on GPUs, layout by layout, from the model's own
files, touching no host."""

from __future__ import annotations

import argparse
import os
import sys

from pyinfra_sglang.cli.arguments import (
    MAX_GPUS,
    add_data,
    at_most,
    profile_name,
    release,
)
from pyinfra_sglang.cli.inventory_input import Refused, invalid, load_inventory
from pyinfra_sglang.cli.json_output import add_json, print_json
from pyinfra_sglang.cli.model_input import read_model_argument

PLAN_EPILOG = """\
The model's size comes from its config.json (and the checkpoint's file sizes where the Hub
or the folder lists them): --model takes a Hub id, read at --revision through --hf-endpoint
(config.json only, never the weights), or a folder holding config.json. The serving choices
(mem_fraction_static, the KV cache floor min_kv_tokens, the overhead per GPU, the KV cache
dtype) are the --profile's; --inventory takes the host's profile, GPUs and release instead.
Exit status: 0 when a layout fits, 1 when none does, 2 for bad input.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = PLAN_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--model",
        metavar="ID_OR_FOLDER",
        help="a Hugging Face model id (org/name) or a folder holding its config.json; with "
        "--inventory: instead of the host's model",
    )
    parser.add_argument(
        "--revision", default="main", help="the Hub revision to read (default: main)"
    )
    parser.add_argument(
        "--hf-endpoint",
        default=None,
        metavar="URL",
        help="the Hub or a mirror (default: $HF_ENDPOINT, else https://huggingface.co)",
    )
    parser.add_argument(
        "--hf-token-file", default=None, metavar="FILE", help="a token, for a gated model"
    )
    parser.add_argument("--gpus", type=at_most(MAX_GPUS, "GPUs per host"), help="GPUs per host")
    parser.add_argument(
        "--gpu-model", metavar="NAME", help="the GPU as nvidia-smi names it (data/gpus.toml)"
    )
    parser.add_argument(
        "--profile",
        type=profile_name,
        default=None,
        help="the profile whose serving choices apply (default: dense-bf16)",
    )
    parser.add_argument(
        "--sglang-version", type=release, default=None, help="SGLang release (default: the pin)"
    )
    parser.add_argument("--inventory", metavar="FILE", help="plan for a host of this inventory")
    parser.add_argument("--inventory-host", metavar="NAME", help="the host (with --inventory)")
    add_data(parser, "with --inventory: ")
    add_json(
        parser,
        '{"model": {"model", "read_from", "params_b", "weights_gb", ...}, "gpus": {"count", '
        '"name", "memory_gb", "memory_bandwidth_gbs"}, "sglang_version", "profile", "layouts": '
        '[{"layout", "tp_size", "ep_size", "dp_attention_size", "fits", "refused", "fit", '
        '"decode_roofline_tokens_per_s"}], "fits", "fewest_gpus", "flash_attn": {"build", "why"}}',
    )


def _mode_problem(args: argparse.Namespace) -> str | None:
    if args.inventory or args.inventory_host:
        if not (args.inventory and args.inventory_host):
            return "--inventory and --inventory-host go together"
        given = [flag for flag, value in _flag_values(args) if value is not None]
        if given:
            return f"{', '.join(given)}: from the inventory with --inventory; leave it out"
        return None
    if args.data:
        return "--data goes with --inventory"
    missing = [f for f, v in (("--model", args.model), ("--gpus", args.gpus)) if v is None]
    if args.gpu_model is None:
        missing.append("--gpu-model")
    if missing:
        return f"give {', '.join(missing)} (or --inventory FILE --inventory-host NAME)"
    return None


def _flag_values(args: argparse.Namespace):
    return (
        ("--gpus", args.gpus),
        ("--gpu-model", args.gpu_model),
        ("--profile", args.profile),
        ("--sglang-version", args.sglang_version),
        ("--hf-endpoint", args.hf_endpoint),
        ("--hf-token-file", args.hf_token_file),
    )


def _from_flags(args: argparse.Namespace) -> dict:
    from pyinfra_sglang.config import HostConfig
    from pyinfra_sglang.gpus import UnknownGpuError, gpu_by_name
    from pyinfra_sglang.model_shape.profile_values import identity_values, profile_values
    from pyinfra_sglang.serving.profiles import ProfileError, load_profile, merge_overrides

    try:
        gpu = gpu_by_name(args.gpu_model)
    except UnknownGpuError as error:
        raise Refused(f"plan: --gpu-model: {error}", 2) from None
    endpoint = args.hf_endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    files, shape = read_model_argument(args, endpoint, args.hf_token_file, "plan: --model")
    try:
        base = load_profile(args.profile or "dense-bf16")
        values = {
            "model": args.model,
            **profile_values(shape, files.weight_bytes),
            **identity_values(args.model, files.config, shape),
        }
        profile = merge_overrides(base, values)
    except ProfileError as error:
        raise Refused(f"plan: {error}", 2) from None
    version = args.sglang_version or HostConfig.model_fields["sglang_version"].default
    return {
        "profile": profile,
        "gpu": gpu,
        "count": args.gpus,
        "version": version,
        "files": files,
        "shape": shape,
        "flash_attn_build": None,
    }


def _from_inventory(args: argparse.Namespace) -> dict:
    from pyinfra_sglang import inventory
    from pyinfra_sglang.model_shape.profile_values import identity_values, profile_values
    from pyinfra_sglang.serving import service_files
    from pyinfra_sglang.serving.profiles import merge_overrides

    loaded = load_inventory("plan", args.inventory, args.data)
    names = [host.name for host in loaded]
    if args.inventory_host not in names:
        raise Refused(
            f"plan: {args.inventory}: no host {args.inventory_host!r}; its hosts: "
            f"{', '.join(names)}",
            2,
        )
    config = inventory.validate_inventory(loaded)[args.inventory_host]
    profile = inventory.host_profile(config)
    files = shape = None
    if args.model:
        endpoint = str(config.hf_endpoint or "https://huggingface.co")
        token_file = str(config.hf_token_file) if config.hf_token_file else None
        files, shape = read_model_argument(args, endpoint, token_file, "plan: --model")
        values = {
            "model": args.model,
            **profile_values(shape, files.weight_bytes),
            **identity_values(args.model, files.config, shape),
        }
        profile = merge_overrides(profile, values)
    node = inventory.node_position_in(config, loaded.get_host(args.inventory_host))
    gpu = service_files.planned_gpu(profile, config.expected_gpu_model)
    if gpu is None:
        raise Refused(
            f"plan: host {args.inventory_host}: no GPU of data/gpus.toml is planned "
            "(expected_gpu_model unset, and the profile names no architecture)",
            2,
        )
    count = service_files.planned_gpus(config, profile, node.nnodes).count * node.nnodes
    return {
        "profile": profile,
        "gpu": gpu,
        "count": count,
        "version": config.sglang_version,
        "files": files,
        "shape": shape,
        "flash_attn_build": config.flash_attn_build,
    }


def _model_summary(plan: dict) -> dict:
    profile, files, shape = plan["profile"], plan["files"], plan["shape"]
    summary = {
        "model": profile.model,
        "read_from": files.where if files else f"profile {profile.name} ({profile.source})",
        "weights_gb": profile.weights_gb,
        "num_layers": profile.num_layers,
        "num_attention_heads": profile.num_attention_heads,
        "num_key_value_heads": profile.num_key_value_heads,
        "kv_bytes_per_token": dict(profile.kv_bytes_per_token),
        "context_length": profile.context_length,
        "active_params_b": profile.active_params_b,
    }
    if shape is not None:
        summary.update(
            {
                "params_b": round(shape.params / 1e9, 2),
                "dtype": shape.dtype,
                "quantization": shape.quantization,
                "num_routed_experts": shape.num_routed_experts,
                "num_experts_per_token": shape.num_experts_per_token,
                "mtp_layers": shape.mtp_layers,
                "weights_from": "file sizes" if files.weight_bytes else "config.json",
                "notes": list(shape.notes),
            }
        )
    return summary


def _model_text(summary: dict) -> str:
    parts = [f"model {summary['model']}"]
    if "params_b" in summary:
        dtype = summary["dtype"]
        if summary["quantization"]:
            dtype = f"{summary['quantization']} weights, the rest {dtype}"
        parts.append(
            f"{summary['params_b']:g}B parameters ({dtype}), "
            f"{summary['weights_gb']:g} GB of weights (from its {summary['weights_from']})"
        )
        if summary["num_routed_experts"]:
            parts.append(
                f"MoE: {summary['num_experts_per_token']} of {summary['num_routed_experts']} "
                f"experts a token, {summary['active_params_b']:g}B parameters read a token"
            )
    elif summary["weights_gb"]:
        parts.append(f"{summary['weights_gb']:g} GB of weights")
    heads = summary["num_key_value_heads"]
    kv = ", ".join(f"{v:,} ({k})" for k, v in summary["kv_bytes_per_token"].items())
    layers = f"{summary['num_layers']} layers" if summary["num_layers"] else None
    if layers:
        attention = f"{summary['num_attention_heads']} attention heads"
        attention += f", {heads} KV heads" if heads else " (MLA: one latent)"
        parts.append(f"{layers}, {attention}")
    if kv:
        parts.append(f"KV cache bytes a token: {kv}")
    if summary["context_length"]:
        parts.append(f"context {summary['context_length']:,} tokens")
    return "; ".join(parts) + f"\n  read from {summary['read_from']}"


def _row(layout) -> str:
    if layout.report is None:
        return f"  {layout.name:<22} refused: {layout.refused}"
    fit = layout.report
    need = fit.need
    verdict = "fits" if layout.fits else ("refused" if layout.refused else "no")
    roofline = f"{layout.decode_tokens_per_s:,.0f}" if layout.decode_tokens_per_s else "-"
    kv_tokens = f"{fit.kv_tokens:,}" if need.fits else "-"
    contexts = (
        f"{fit.full_context_requests:.1f}"
        if need.fits and fit.full_context_requests is not None
        else "-"
    )
    row = (
        f"  {layout.name:<22} {verdict:<7} {need.need:7.1f} / {need.budget:5.1f} "
        f"{need.weights_gib:8.1f} {need.kv_gib:7.1f} {need.overhead_gib + need.mtp_gib:8.1f} "
        f"{fit.free_gib:+7.1f} {kv_tokens:>12} {contexts:>8} {roofline:>9}"
    )
    if layout.refused:
        row += f"\n  {'':<22} refused by SGLang {layout.refused}"
    return row


HEADER = (
    f"  {'layout':<22} {'fits':<7} {'need / budget':>15} {'weights':>8} {'KV floor':>7} "
    f"{'overhead':>8} {'free':>7} {'KV tokens':>12} {'contexts':>8} {'decode/s':>9}"
)


def run(args: argparse.Namespace) -> int:
    from pyinfra.api.exceptions import PyinfraError

    from pyinfra_sglang import inventory
    from pyinfra_sglang.serving.model_plan import plan_layouts

    problem = _mode_problem(args)
    if problem:
        print(f"plan: {problem}", file=sys.stderr)
        return 2
    try:
        plan = _from_inventory(args) if args.inventory else _from_flags(args)
        layouts = plan_layouts(plan["profile"], plan["gpu"], plan["count"], plan["version"])
    except Refused as refused:
        print(refused, file=sys.stderr)
        return refused.status
    except inventory.InventoryError as error:
        return invalid(args, error)
    except PyinfraError as error:
        print(f"plan: {error}", file=sys.stderr)
        return 2
    profile, gpu, count = plan["profile"], plan["gpu"], plan["count"]
    from pyinfra_sglang.serving.flash_attn_need import flash_attn_need

    flash_attn = flash_attn_need(plan["flash_attn_build"], profile, [gpu.arch])
    fitting = [layout for layout in layouts if layout.fits]
    fewest = min((layout.tp_size for layout in fitting), default=None)
    summary = _model_summary(plan)
    if args.json:
        print_json(
            {
                "model": summary,
                "gpus": {
                    "count": count,
                    "name": gpu.name,
                    "memory_gb": gpu.memory_gb,
                    "memory_bandwidth_gbs": gpu.memory_bandwidth_gbs,
                },
                "sglang_version": plan["version"],
                "profile": profile.name,
                "layouts": [layout.as_dict() for layout in layouts],
                "fits": bool(fitting),
                "fewest_gpus": fewest,
                "flash_attn": {"build": flash_attn.build, "why": flash_attn.why},
            }
        )
        return 0 if fitting else 1
    print(_model_text(summary))
    print(
        f"on {count} x {gpu.name} ({gpu.memory_gb:g} GB, {gpu.memory_bandwidth_gbs:,} GB/s "
        f"each), SGLang {plan['version']}, the serving choices of profile {profile.name} "
        f"(KV cache floor {profile.min_kv_tokens or 0:,} tokens, overhead "
        f"{profile.gpu_overhead_gb:g} GiB a GPU); GiB per GPU:"
    )
    print(HEADER)
    for layout in layouts:
        print(_row(layout))
    print(f"flash-attn build: {'yes' if flash_attn.build else 'no'}, {flash_attn.why}")
    if fitting:
        print(
            f"fits: {len(fitting)} of {len(layouts)} layouts; the fewest GPUs that hold it: "
            f"{fewest}. 'contexts': requests of the full context the KV cache holds at once; "
            "'decode/s': the batch-1 decode roofline (tokens/s)"
        )
        return 0
    print(f"no layout fits {count} x {gpu.name}: use more or larger GPUs, or a smaller model")
    return 1
