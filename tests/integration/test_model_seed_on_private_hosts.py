"""Fetch once a site, end to end where nft is allowed: test hosts of a private network, each
in its own network namespace (the site hosts share this machine's, where nft is refused).

The seed holds the snapshot already, as its own download leaves it (the real huggingface_hub
fetched it from the Hub stand-in into the seed's cache). In one run the other host says
which address it reaches the seed from, the seed loads its firewall, serves, the other host
copies the snapshot over the private network and checks it, and the seed stops serving and
deletes its firewall. A third host of the network, not in the inventory, probes the seed's
port all along: it never gets in, while the copying host does. The hosts never reach the
Hub: only the controller reads its file list, on this machine's loopback."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from pyinfra_sglang.inventory import HostConfig
from roles.sglang_service import useradd_command
from tests.hosts.apply import apply, write_inventory
from tests.hosts.site_model import FETCH_ONCE_MODEL, SITE_MODEL_COMMIT, profile_overrides

pytestmark = pytest.mark.hosts

DEPLOY = "tests/hosts/deploys/model_fetch_once.py"
VENV = "/opt/sglang/venvs/fetch-once-test"
HF_HOME = "/var/lib/sglang/huggingface"
CACHE = f"{HF_HOME}/hub"
FOLDER = f"{CACHE}/models--{FETCH_ONCE_MODEL.replace('/', '--')}"
SNAPSHOT = f"{FOLDER}/snapshots/{SITE_MODEL_COMMIT}"
TABLE = "inet pyinfra_sglang_model_seed"
PROBE_UNIT = "seed-port-probe.service"
# Connects to the seed's port every 20 ms and writes one word a try: open (connected),
# refused (nothing listens), dropped (no answer: a firewall drops it).
PROBE = """
import socket, sys, time
address, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(out, "a", buffering=1) as log:
    while True:
        try:
            socket.create_connection((address, port), timeout=0.3).close()
            log.write("open\\n")
        except ConnectionRefusedError:
            log.write("refused\\n")
        except OSError:
            log.write("dropped\\n")
        time.sleep(0.02)
"""


def seed_holds_the_snapshot(pool, seed, endpoint: str) -> None:
    """The snapshot in the seed's Hub cache, owned by the service user, as a download by the
    model role leaves it: fetched with the real huggingface_hub into the seed's root."""
    from huggingface_hub import snapshot_download

    pool.run(
        seed,
        f"{useradd_command('sglang')} && install -d -m 750 -o sglang -g sglang {HF_HOME} {CACHE}",
    )
    snapshot_download(
        FETCH_ONCE_MODEL,
        revision=SITE_MODEL_COMMIT,
        cache_dir=str(seed.root / CACHE.lstrip("/")),
        endpoint=endpoint,
    )
    pool.run(seed, f"chown -R sglang:sglang {HF_HOME}")


def probe(pool, prober, seed, port: int) -> None:
    out = f"/root/probe-{seed.address}.log"
    pool.run(
        prober,
        f"rm -f {out} && systemd-run --quiet --unit={PROBE_UNIT} python3 -c "
        f"{shlex.quote(PROBE)} {seed.address} {port} {out}",
    )


def probed(pool, prober, seed) -> dict[str, int]:
    pool.run(prober, f"systemctl stop {PROBE_UNIT}")
    words = pool.run(prober, f"cat /root/probe-{seed.address}.log").stdout.split()
    return {word: words.count(word) for word in sorted(set(words))}


def test_the_copy_passes_the_seeds_firewall_a_stranger_never_does_and_it_is_gone_after(
    private_pool, model_hub, tmp_path
):
    endpoint, hub = model_hub
    seed, other, stranger = private_pool.boot(3)
    for test_host in (seed, other):
        subprocess.run(
            ["chroot", str(test_host.root), "python3", "-m", "venv", "--without-pip", VENV],
            check=True,
        )
    seed_holds_the_snapshot(private_pool, seed, endpoint)
    expected = {p.name: p.read_bytes() for p in (seed.root / SNAPSHOT.lstrip("/")).iterdir()}
    data = {
        **private_pool.inventory_data(),
        "sglang_profile_overrides": profile_overrides(FETCH_ONCE_MODEL),
        "sglang_model_profile": "dense-bf16",
        "sglang_model_revision": SITE_MODEL_COMMIT,
        "hf_endpoint": endpoint,
        "venv_path": VENV,
        "model_fetch_once": True,
    }
    inventory = write_inventory(
        tmp_path / "site.py", {"site": [(h.address, data) for h in (seed, other)]}
    )
    port = HostConfig().model_seed_port
    seen = len(hub.requests)
    probe(private_pool, stranger, seed, port)
    probe(private_pool, other, seed, port)
    try:
        fetched = apply(inventory, DEPLOY)
    finally:
        from_stranger = probed(private_pool, stranger, seed)
        from_other = probed(private_pool, other, seed)
    assert fetched.returncode == 0 and not fetched.errors(), fetched.describe()
    print("fetch once:", fetched.stderr)
    print("probes: stranger", from_stranger, "copying host", from_other)
    # The seed admitted the address the other host reaches it from, and served.
    assert (
        f"[{seed.address}] serving the snapshot to {other.address} "
        f"(its firewall admits {other.address})" in fetched.stderr
    ), fetched.describe()
    # While it served, the copying host got in; the stranger never did, its tries dropped.
    assert from_other.get("open", 0) >= 1, from_other
    assert from_stranger.get("open", 0) == 0 and from_stranger.get("dropped", 0) >= 1, from_stranger
    copy = other.root / SNAPSHOT.lstrip("/")
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == expected
    log = private_pool.run(other, "tail -n 1 /var/log/pyinfra-sglang/model-download.log")
    assert "copied from the site's seed" in log.stdout, log.stdout
    # Neither host asked the Hub for a file (they cannot reach it; nor did the controller).
    assert not [p for m, p, _ in hub.requests[seen:] if "/resolve/" in p], hub.requests[seen:]
    # Once the copy was done the seed stopped serving and deleted its table.
    listed = private_pool.run(seed, f"nft list table {TABLE}", check=False)
    assert listed.returncode != 0, listed.stdout
    serving = private_pool.run(seed, "systemctl is-active pyinfra-sglang-model-seed", check=False)
    assert serving.stdout.strip() != "active", serving.stdout
    apply(inventory, DEPLOY).assert_unchanged()
