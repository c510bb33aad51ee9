"""Secure Boot and the NVIDIA module DKMS builds: a module not signed by an enrolled key is
rejected at load ("Key was rejected by service"). What a host's state asks for, from facts;
the MOK key pair the inventory names, read and checked on the controller."""

from __future__ import annotations

import base64
import stat
from dataclasses import dataclass
from pathlib import Path

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang import data

MAX_MOK_FILE_BYTES = 64 * 1024
PEM_KEY_HEADERS = (b"-----BEGIN PRIVATE KEY-----", b"-----BEGIN RSA PRIVATE KEY-----")


class MokFileError(PyinfraError):
    """A MOK file named in the inventory is missing, unreadable or not what it should be."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class MokPair:
    key: bytes  # PEM private key
    cert: bytes  # DER certificate

    def cert_base64(self) -> str:
        return base64.b64encode(self.cert).decode()


def mok_paths(family: str) -> dict[str, str]:
    """Where DKMS on that family of distros signs from: {"key": ..., "cert": ...}."""
    mok = data.nvidia().secure_boot.mok[family]
    return {"key": mok.key, "cert": mok.cert}


def _read(path: Path, field: str) -> bytes:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise MokFileError(field, f"{path} is not a file")
        if info.st_size > MAX_MOK_FILE_BYTES:
            raise MokFileError(field, f"{path} is larger than {MAX_MOK_FILE_BYTES} bytes")
        return path.read_bytes()
    except OSError as error:
        raise MokFileError(field, f"cannot read {path}: {error.strerror}") from None


def read_mok_pair(key_file: Path | None, cert_file: Path | None) -> MokPair | None:
    """The pair, or None when the inventory names neither; a PEM private key and a DER
    certificate (what mokutil --import and DKMS take), else MokFileError naming the field."""
    if key_file is None and cert_file is None:
        return None
    if key_file is None or cert_file is None:
        missing = "nvidia_mok_key_file" if key_file is None else "nvidia_mok_cert_file"
        raise MokFileError(
            missing, "a MOK key pair needs both nvidia_mok_key_file and nvidia_mok_cert_file"
        )
    key = _read(key_file, "nvidia_mok_key_file")
    if not key.lstrip().startswith(PEM_KEY_HEADERS):
        raise MokFileError(
            "nvidia_mok_key_file", f"{key_file} is not a PEM private key (-----BEGIN ...)"
        )
    cert = _read(cert_file, "nvidia_mok_cert_file")
    if not cert.startswith(b"\x30\x82"):  # a DER SEQUENCE, as openssl -outform DER writes
        raise MokFileError(
            "nvidia_mok_cert_file",
            f"{cert_file} is not a DER certificate (openssl x509 -outform DER converts a PEM one)",
        )
    return MokPair(key=key, cert=cert)


def key_readable_by_others(key_file: Path) -> bool:
    return bool(key_file.stat().st_mode & 0o077)


def parse_secure_boot_state(lines: list[str]) -> dict:
    """The SecureBootState fact: ``mokutil <exit status>`` after mokutil's own output when
    it ran, then ``efivar <byte>``, ``efi`` (firmware without the variable) or ``bios``; and
    ``signer <name>`` of the installed nvidia module (empty: unsigned, or none)."""
    text = [line.strip() for line in lines]
    enabled, source = None, "unknown"
    if "SecureBoot enabled" in text:
        enabled, source = True, "mokutil"
    elif "SecureBoot disabled" in text:
        enabled, source = False, "mokutil"
    else:
        for line in text:
            if line.startswith("efivar "):
                enabled, source = line.split()[-1] == "1", "EFI variable"
            elif line == "bios":
                enabled, source = False, "no EFI firmware"
    signer = next((line[len("signer ") :] for line in text if line.startswith("signer ")), "")
    return {"enabled": enabled, "source": source, "module_signer": signer or None}


def parse_mok_enrolled(lines: list[str]) -> bool | None:
    """mokutil --test-key's answer; None when mokutil did not answer (not installed)."""
    text = " ".join(lines)
    if "is already enrolled" in text:
        return True
    if "is not enrolled" in text:
        return False
    return None


def enrollment_steps(host_name: str, cert_path: str) -> str:
    return (
        f"enroll it once on {host_name}: copy the certificate there as {cert_path}, run "
        f"`mokutil --import {cert_path}` (it asks for a one-time password), reboot, choose "
        "Enroll MOK at the MOK manager's console and enter that password; then run the deploy "
        "again"
    )


def secure_boot_refusal(
    host_name: str, state: dict, pair: MokPair | None, enrolled: bool | None
) -> str | None:
    """Why the driver cannot be installed on this host as things are, or None: Secure Boot
    on and no key pair to sign with, or a key mokutil says is not enrolled. Secure Boot is
    as the host reports it (a container normally sees no EFI variables: off)."""
    if not state.get("enabled"):
        return None
    if pair is None:
        return (
            f"host {host_name}: Secure Boot is on ({state['source']}), so the NVIDIA module "
            "DKMS builds must be signed by an enrolled key or the kernel rejects it at load "
            '("Key was rejected by service"). Set nvidia_mok_key_file and '
            "nvidia_mok_cert_file (a MOK key pair: openssl req -new -x509 -newkey rsa:2048 "
            "-nodes -keyout mok.key -outform DER -out mok.der -subj '/CN=DKMS module signing/') "
            "and enroll it. Nothing was changed."
        )
    if enrolled is None:
        return (
            f"host {host_name}: Secure Boot is on and mokutil is not installed, so whether "
            "the nvidia_mok_cert_file key is enrolled cannot be checked; install mokutil "
            "(apt-get install mokutil) and run the deploy again. Nothing was changed."
        )
    if not enrolled:
        cert = "/root/nvidia-mok.der"
        return (
            f"host {host_name}: Secure Boot is on and the nvidia_mok_cert_file key is not "
            f"enrolled, so a module it signs would still be rejected; "
            f"{enrollment_steps(host_name, cert)}. Nothing was changed."
        )
    return None
