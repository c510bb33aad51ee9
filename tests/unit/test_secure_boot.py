"""Secure Boot: the host's state as mokutil or the EFI variable reports it, the MOK key pair
read on the controller, when the driver is refused, and where the pair goes."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from checks.facts import FileDigests, MokEnrolled, SecureBootState
from pyinfra_sglang.driver.secure_boot import (
    MokFileError,
    parse_mok_enrolled,
    parse_secure_boot_state,
    read_mok_pair,
    secure_boot_refusal,
)
from roles.secure_boot import mok_key_pair_installed
from tests.unit.ophelper import run_operation

STANDIN = Path(__file__).resolve().parents[1] / "hosts" / "mokutil_standin.py"


@pytest.mark.parametrize(
    ("lines", "enabled", "source"),
    [
        (["SecureBoot enabled", "mokutil 0", "efivar 1", "signer "], True, "mokutil"),
        (["SecureBoot disabled", "mokutil 0", "efivar 0", "signer "], False, "mokutil"),
        (["efivar 1", "signer "], True, "EFI variable"),  # no mokutil
        (["Failed to read SecureBoot", "mokutil 255", "bios", "signer "], False, "no EFI firmware"),
        (["efi", "signer "], None, "unknown"),  # EFI without the variable: cannot tell
    ],
)
def test_the_state_comes_from_mokutil_else_the_efi_variable(lines, enabled, source):
    state = parse_secure_boot_state(lines)
    assert (state["enabled"], state["source"], state["module_signer"]) == (enabled, source, None)


def test_the_module_signer_is_read():
    state = parse_secure_boot_state(["SecureBoot enabled", "efivar 1", "signer DKMS module"])
    assert state["module_signer"] == "DKMS module"


def test_the_double_answers_as_mokutil_and_the_parsers_read_it(tmp_path):
    # mokutil's messages and exit statuses (lcp/mokutil: sb_state(), test_key()).
    cert = tmp_path / "mok.der"
    cert.write_bytes(b"\x30\x82certificate")
    state = tmp_path / "state"
    state.mkdir()
    (state / "sb-state").write_text("enabled\n")

    def mokutil(*args):
        return subprocess.run(
            ["python3", str(STANDIN), *args],
            capture_output=True,
            text=True,
            env={"MOKUTIL_STANDIN_STATE": str(state), "PATH": "/usr/bin:/bin"},
        )

    sb = mokutil("--sb-state")
    assert (sb.returncode, sb.stdout) == (0, "SecureBoot enabled\n")
    assert parse_secure_boot_state([*sb.stdout.splitlines(), "mokutil 0", "efi"])["enabled"]
    unknown = mokutil("--test-key", str(cert))
    assert (unknown.returncode, unknown.stdout) == (0, f"{cert} is not enrolled\n")
    assert parse_mok_enrolled(unknown.stdout.splitlines()) is False
    (state / "enrolled").write_text(hashlib.sha256(cert.read_bytes()).hexdigest() + "\n")
    known = mokutil("--test-key", str(cert))
    assert (known.returncode, known.stdout) == (1, f"{cert} is already enrolled\n")
    assert parse_mok_enrolled(known.stdout.splitlines()) is True
    assert parse_mok_enrolled([]) is None  # no mokutil on the host
    assert mokutil("--import", str(cert)).returncode == 2  # nothing it would invent
    assert "mokutil --sb-state" in SecureBootState().command()
    assert "base64 -d" in MokEnrolled().command(cert_base64="MIIB")


def pair(tmp_path: Path) -> tuple[Path, Path]:
    key, cert = tmp_path / "mok.key", tmp_path / "mok.der"
    key.write_bytes(b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n")
    cert.write_bytes(b"\x30\x82\x01\x0acertificate")
    return key, cert


def test_a_pair_is_both_files_a_pem_key_and_a_der_certificate(tmp_path):
    key, cert = pair(tmp_path)
    assert read_mok_pair(None, None) is None
    read = read_mok_pair(key, cert)
    assert read.key.startswith(b"-----BEGIN PRIVATE KEY-----") and read.cert == cert.read_bytes()
    with pytest.raises(MokFileError) as only_key:
        read_mok_pair(key, None)
    assert only_key.value.field == "nvidia_mok_cert_file"
    with pytest.raises(MokFileError, match="not a PEM private key") as swapped:
        read_mok_pair(cert, key)
    assert swapped.value.field == "nvidia_mok_key_file"
    pem_cert = tmp_path / "mok.pem"
    pem_cert.write_text("-----BEGIN CERTIFICATE-----\n")
    with pytest.raises(MokFileError, match="not a DER certificate"):
        read_mok_pair(key, pem_cert)
    with pytest.raises(MokFileError, match="cannot read"):
        read_mok_pair(tmp_path / "missing.key", cert)


def test_the_inventory_names_the_field_of_a_bad_pair(tmp_path):
    from pyinfra_sglang.inventory import InventoryError, load_inventory_file, validate_inventory

    key, cert = pair(tmp_path)
    (tmp_path / "inv.py").write_text(
        "gpus = [('gpu-1', {'ssh_strict_host_key_checking': 'yes', "
        f"'nvidia_mok_key_file': {str(key)!r}}})]\n"
    )
    with pytest.raises(InventoryError) as caught:
        validate_inventory(load_inventory_file(str(tmp_path / "inv.py")))
    [problem] = caught.value.problems
    assert (problem.host, problem.field) == ("gpu-1", "nvidia_mok_cert_file")


def test_refused_only_when_secure_boot_is_on_without_an_enrolled_key(tmp_path):
    on = {"enabled": True, "source": "mokutil"}
    read = read_mok_pair(*pair(tmp_path))
    assert secure_boot_refusal("gpu-1", {"enabled": False, "source": "mokutil"}, None, None) is None
    assert secure_boot_refusal("gpu-1", {"enabled": None, "source": "unknown"}, None, None) is None
    without = secure_boot_refusal("gpu-1", on, None, None)
    assert without.startswith("host gpu-1: Secure Boot is on (mokutil)")
    assert "nvidia_mok_key_file" in without and without.endswith("Nothing was changed.")
    unenrolled = secure_boot_refusal("gpu-1", on, read, False)
    assert "is not enrolled" in unenrolled and "mokutil --import" in unenrolled
    assert "mokutil is not installed" in secure_boot_refusal("gpu-1", on, read, None)
    assert secure_boot_refusal("gpu-1", on, read, True) is None


def test_the_pair_goes_where_dkms_signs_from_created_0600_before_its_content(tmp_path):
    key, cert = pair(tmp_path)
    args = {"key_file": str(key), "cert_file": str(cert), "family": "debian"}
    commands, noops = run_operation(
        mok_key_pair_installed,
        {FileDigests: {"/var/lib/dkms/mok.key": None, "/var/lib/dkms/mok.pub": None}},
        **args,
    )
    # One upload of both files (put_private_file: 0600/0644 staging first, then moved).
    assert (
        commands
        == [
            f"FunctionCommand(_put, ({str(key)!r}, {str(cert)!r}, "
            "{'key': '/var/lib/dkms/mok.key', 'cert': '/var/lib/dkms/mok.pub'}), {})"
        ]
        and noops == []
    )
    # The key is uploaded, never in a command, not even the upload's own string form (which
    # pyinfra's debug output shows).
    assert "MIIE" not in "".join(commands)
    same = {
        "/var/lib/dkms/mok.key": hashlib.sha256(key.read_bytes()).hexdigest(),
        "/var/lib/dkms/mok.pub": hashlib.sha256(cert.read_bytes()).hexdigest(),
    }
    assert run_operation(mok_key_pair_installed, {FileDigests: same}, **args) == (
        [],
        ["the MOK key pair is in /var/lib/dkms/mok.key and /var/lib/dkms/mok.pub"],
    )
    # Only what differs is written; Ubuntu's paths for Ubuntu.
    only_key = run_operation(
        mok_key_pair_installed,
        {
            FileDigests: {
                "/var/lib/shim-signed/mok/MOK.der": hashlib.sha256(cert.read_bytes()).hexdigest()
            }
        },
        **{**args, "family": "ubuntu"},
    )[0]
    assert only_key == [
        f"FunctionCommand(_put, ({str(key)!r}, {str(cert)!r}, "
        "{'key': '/var/lib/shim-signed/mok/MOK.priv'}), {})"
    ]


def test_private_files_are_created_with_their_mode_before_any_content(monkeypatch):
    # The shared helper (roles/common.py) the MOK pair and the model's token go through.
    from roles import common

    calls = []
    monkeypatch.setattr(common, "run_on_host", lambda host, cmd: calls.append(cmd) or (True, ""))
    monkeypatch.setattr(common, "upload_into", lambda *a: calls.append(("upload", a[2])))
    common.put_private_file(object(), b"secret", "/var/lib/dkms/mok.key", "600", "the key")
    assert calls == [
        "mkdir -p /var/lib/dkms && rm -f /var/lib/dkms/mok.key.pyinfra-sglang-new && "
        "install -m 600 /dev/null /var/lib/dkms/mok.key.pyinfra-sglang-new",
        ("upload", "/var/lib/dkms/mok.key.pyinfra-sglang-new"),
        "mv -f /var/lib/dkms/mok.key.pyinfra-sglang-new /var/lib/dkms/mok.key",
    ]
