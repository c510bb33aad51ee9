"""The SGLang service: is it running, is it running what the inventory renders, and does it
answer a question correctly."""

from __future__ import annotations

from pyinfra_sglang.audit.findings import Finding


def findings_for_service(unit: str, state: dict[str, str]) -> list[Finding]:
    if state.get("LoadState") in (None, "not-found"):
        return [
            Finding(
                "fail",
                "service-down",
                f"{unit} is not installed. Deploy it with `pyinfra INVENTORY deploy/site.py`.",
            )
        ]
    if state.get("Result") == "start-limit-hit":
        return [
            Finding(
                "fail",
                "service-down",
                f"{unit} crashed at every start until its start limit stopped it (restarted "
                f"{state.get('NRestarts', '?')} times). Read `journalctl -u {unit} -n 100`; once "
                "fixed, `pyinfra INVENTORY deploy/site.py` starts it again.",
                evidence=state,
            )
        ]
    if state.get("ActiveState") != "active" or state.get("SubState") != "running":
        return [
            Finding(
                "fail",
                "service-down",
                f"{unit} is {state.get('ActiveState')}/{state.get('SubState')} "
                f"(restarted {state.get('NRestarts', '?')} times); expected active/running. "
                f"Read `journalctl -u {unit} -n 100`.",
                evidence=state,
            )
        ]
    return [
        Finding(
            "ok",
            "service",
            f"{unit} active since {state.get('ActiveEnterTimestamp') or '?'}.",
            evidence={"restarts": state.get("NRestarts")},
        )
    ]


def findings_for_unit_drift(
    expected: dict[str, str], current: dict[str, str | None]
) -> list[Finding]:
    """``expected``: {path: sha256 of what deploy/site.py would render}; ``current``: the
    digests on the host. Contents are never shown: the env and config files hold secrets."""
    missing = sorted(path for path in expected if current.get(path) is None)
    changed = sorted(p for p in expected if current.get(p) not in (None, expected[p]))
    if not missing and not changed:
        return [
            Finding("ok", "unit", f"{len(expected)} service files as rendered from the inventory.")
        ]
    parts = []
    if changed:
        parts.append(f"differ from what the inventory renders: {', '.join(changed)}")
    if missing:
        parts.append(f"missing: {', '.join(missing)}")
    return [
        Finding(
            "fail",
            "unit-drift",
            f"Service files {'; '.join(parts)}. Either someone edited the host or the facts "
            "changed (GPU count, SGLang release); `pyinfra INVENTORY deploy/site.py` renders and "
            "restarts with rollback.",
            evidence={"changed": changed, "missing": missing},
        )
    ]


def findings_for_decode(result: dict | None, skipped: str | None = None) -> list[Finding]:
    if result is None:
        return (
            [Finding("warn", "decode-sanity", f"decode prompt not run: {skipped}.")]
            if skipped
            else []
        )
    evidence = {
        key: result.get(key)
        for key in ("reason", "ttft_s", "tokens_per_s", "completion_tokens", "model")
    }
    if result.get("ok"):
        return [
            Finding(
                "ok",
                "decode-sanity",
                f"answered {result.get('expect')!r} (TTFT {result.get('ttft_s') or 0:.2f} s, "
                f"{result.get('tokens_per_s') or 0:.1f} tok/s, "
                f"{result.get('completion_tokens')} tokens).",
                evidence=evidence,
            )
        ]
    return [
        Finding(
            "fail",
            "decode-sanity",
            result.get("message") or result.get("reason", "failed"),
            evidence=evidence,
        )
    ]
