"""The model role on the site hosts: the profile's model downloaded from a Hub stand-in at a
pinned commit by the venv's real huggingface_hub, a second apply that changes nothing, the
service starting from that snapshot alone, a download killed mid-file that the next apply
resumes, and refusals before any change (a revision the Hub lacks, a gated repository, too
little disk)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.hosts.apply import apply
from tests.hosts.hubstandin import LFS_THRESHOLD
from tests.hosts.site_model import (
    FETCH_ONCE_MODEL,
    RESUMABLE_MODEL,
    RESUMABLE_WEIGHTS,
    SITE_MODEL,
    SITE_MODEL_COMMIT,
    model_files,
    other_model,
)

pytestmark = pytest.mark.hosts

CACHE = "/var/lib/sglang/huggingface/hub"
SNAPSHOT = f"{CACHE}/models--Qwen--Qwen3-8B/snapshots/{SITE_MODEL_COMMIT}"
DOWNLOAD = f"Model weights | Download {SITE_MODEL} at {SITE_MODEL_COMMIT[:12]}"


def test_the_first_apply_downloads_the_pinned_snapshot(host_pool, hosts, inventory):
    expected = model_files(LFS_THRESHOLD + 1024 * 1024)
    for h in hosts:
        listing = host_pool.run(h, f"cd {SNAPSHOT} && find -L . -type f -printf '%s %P\\n'")
        assert dict(
            (path, int(size))
            for size, path in (line.split(" ", 1) for line in listing.stdout.split("\n") if line)
        ) == {name: len(content) for name, content in expected.items()}
        weights = (h.root / SNAPSHOT.lstrip("/") / "model.safetensors").resolve()
        assert weights.read_bytes() == expected["model.safetensors"]
        # The download ran as the service user (before: root), which the log records, and
        # that user's log; the env file it read (endpoint, token) is gone.
        log = "/var/log/pyinfra-sglang/model-download.log"
        first = host_pool.run(h, f"head -n 1 {log}").stdout
        assert first.rstrip().endswith(f"into {CACHE} as sglang"), first
        assert host_pool.run(h, f"stat -c '%a %U' {log}").stdout.strip() == "640 sglang"
        assert host_pool.run(h, "ls -A /run/pyinfra-sglang").stdout.strip() == ""
    # Complete: the next apply reads sizes only and changes nothing.
    again = apply(inventory, options=("-v",))
    again.assert_unchanged()
    for h in hosts:
        assert DOWNLOAD in again.unchanged(h.address)
    assert f"{SITE_MODEL} at {SITE_MODEL_COMMIT}: 3 files" in again.stderr
    # The service serves that snapshot: the pinned commit on its command line, and the Hub
    # client offline in its environment, so a restart never reaches the Hub.
    for h in hosts:
        argv = json.loads(host_pool.run(h, "cat /run/sglang-standin/30000.json").stdout)["argv"]
        assert argv[argv.index("--revision") + 1] == SITE_MODEL_COMMIT
        env = host_pool.run(h, "cat /etc/sglang/sglang.env").stdout.splitlines()
        assert "HF_HUB_OFFLINE=1" in env


def test_the_service_starts_from_the_snapshot_alone(host_pool, hosts, inventory):
    """Served offline: the server loads the downloaded snapshot (the stand-in resolves it as
    huggingface_hub does with HF_HUB_OFFLINE=1); without it, a restart fails although the Hub
    is up, instead of fetching 400 GB behind the health wait. The next apply downloads it
    again and brings the service back."""
    host = hosts[0]
    record = json.loads(host_pool.run(host, "cat /run/sglang-standin/30000.json").stdout)
    assert record["snapshot"] == SNAPSHOT
    host_pool.run(host, f"rm -rf {SNAPSHOT}")
    host_pool.run(host, "systemctl restart sglang.service; sleep 3", check=False)
    journal = host_pool.run(host, "journalctl -u sglang.service -n 30 -o cat").stdout
    assert "LocalEntryNotFoundError: Cannot find an appropriate cached snapshot" in journal
    back = apply(inventory, options=("--limit", host.address))
    assert back.returncode == 0 and not back.errors(), back.describe()
    assert DOWNLOAD in back.changed(host.address), back.describe()
    record = json.loads(host_pool.run(host, "cat /run/sglang-standin/30000.json").stdout)
    assert (record["state"], record["snapshot"]) == ("ready", SNAPSHOT)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("sglang_model_revision=no-such-branch", "the Hub has no such revision"),
        (
            other_model("test-org/gated-model"),
            "the repository is gated; the token has no access",
        ),
    ],
)
def test_what_the_hub_refuses_stops_the_run_before_any_change(hosts, inventory, data, message):
    refused = apply(inventory, options=("--data", data))
    assert refused.returncode != 0 and refused.logged_changes() == [], refused.describe()
    assert message in refused.stderr and "Nothing was changed" in refused.stderr


def test_too_little_disk_at_the_cache_is_refused_naming_needed_and_free(
    host_pool, hosts, inventory
):
    small, _ = hosts
    # A 64 MB filesystem over the cache: the snapshot is not there, 10 GB margin is not free.
    host_pool.run(small, f"mount -t tmpfs -o size=64m model-cache-test {CACHE}")
    try:
        refused = apply(inventory)
        assert refused.returncode != 0 and refused.logged_changes() == [], refused.describe()
        assert f"host {small.address}: {SITE_MODEL} at {SITE_MODEL_COMMIT} needs" in refused.stderr
        assert "GB free at /var/lib/sglang/huggingface/hub" in refused.stderr
        assert "0.1 GB are free" in refused.stderr
    finally:
        host_pool.run(small, f"umount {CACHE}")


def test_a_cache_folder_the_service_user_must_not_own_is_refused_and_nothing_changes_owner(
    host_pool, hosts, inventory
):
    """Issue 35 N1: the role re-owned the cache folder recursively for the service user, so
    /etc (or a symlink to it, or a tree of root's) was one inventory value from a root
    escalation. System trees are refused by validation, before any host is reached; a
    symlinked component and another owner's tree by the host's own state, at planning."""
    host = hosts[0]
    for path in ("/etc", "/usr/share"):
        refused = apply(inventory, options=("--data", f"sglang_model_cache_dir={path}"))
        assert refused.returncode != 0 and not refused.executed, refused.describe()
        assert f"sglang_model_cache_dir = '{path}'" in refused.stderr
        assert "a system tree the service user must not own" in refused.stderr
    host_pool.run(
        host,
        "ln -sfn /etc /srv/etc-link && mkdir -p /srv/root-hub/models--x "
        "&& echo x > /srv/root-hub/models--x/blob",
    )
    owners = "stat -c '%n %U:%G %a' /etc /etc/passwd /srv/root-hub /srv/root-hub/models--x/blob"
    before = host_pool.run(host, owners).stdout
    try:
        for path, message in (
            ("/srv/etc-link/hub", "/srv/etc-link resolves to /etc: a symlink in the path"),
            ("/srv/root-hub", "the deploy does not re-own a tree"),
        ):
            refused = apply(
                inventory,
                options=("--limit", host.address, "--data", f"sglang_model_cache_dir={path}"),
            )
            assert refused.returncode != 0 and refused.logged_changes() == [], refused.describe()
            assert message in refused.stderr and "Nothing was changed" in refused.stderr
        assert host_pool.run(host, owners).stdout == before
        assert host_pool.run(host, "test -e /etc/hub", check=False).returncode == 1
    finally:
        host_pool.run(host, "rm -rf /srv/etc-link /srv/root-hub")


def test_the_cache_can_live_on_another_filesystem(host_pool, hosts, inventory):
    elsewhere = "/srv/models/hub"
    moved = ("--data", f"sglang_model_cache_dir={elsewhere}")
    try:
        result = apply(inventory, options=moved)
        assert result.returncode == 0 and not result.errors(), result.describe()
        for h in hosts:
            assert DOWNLOAD in result.changed(h.address)
            listing = host_pool.run(
                h, f"find -L {elsewhere}/models--Qwen--Qwen3-8B/snapshots -type f -printf '%P\\n'"
            ).stdout.split()
            assert sorted(listing) == sorted(
                f"{SITE_MODEL_COMMIT}/{name}" for name in model_files(1)
            )
            # Written by the service user (the service role leaves a cache outside its own
            # folders alone: before, root's).
            not_its = host_pool.run(h, f"find {elsewhere} ! -user sglang").stdout.split()
            assert not_its == [], not_its
            env = host_pool.run(h, "cat /etc/sglang/sglang.env").stdout.splitlines()
            assert f"HF_HUB_CACHE={elsewhere}" in env
        again = apply(inventory, options=moved)
        again.assert_unchanged()
    finally:
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()
    for h in hosts:
        env = host_pool.run(h, "cat /etc/sglang/sglang.env").stdout
        assert "HF_HUB_CACHE" not in env  # the default: HF_HOME's own hub/ folder


def test_a_download_killed_mid_file_resumes_on_the_next_apply(
    host_pool, hosts, inventory, model_hub
):
    hub = model_hub[1]
    target = hosts[0]
    folder = f"{CACHE}/models--test-org--resumable-model"
    blobs = target.root / folder.lstrip("/") / "blobs"
    weights_url = f"/{RESUMABLE_MODEL}/resolve/{SITE_MODEL_COMMIT}/model.safetensors"
    options = (
        "--limit",
        target.address,
        "--data",
        other_model(RESUMABLE_MODEL),
    )
    download = f"Model weights | Download {RESUMABLE_MODEL} at {SITE_MODEL_COMMIT[:12]}"
    first: list = []
    try:
        # The stand-in sends the weights at 2 MiB/s: kill the download unit's processes
        # (SIGKILL: no clean-up) once part of the weights is on disk.
        applying = threading.Thread(target=lambda: first.append(apply(inventory, options=options)))
        applying.start()
        cut = 0
        deadline = time.monotonic() + 300
        while not cut and applying.is_alive() and time.monotonic() < deadline:
            for partial in blobs.glob("*.incomplete") if blobs.is_dir() else ():
                size = partial.stat().st_size
                if 0 < size < RESUMABLE_WEIGHTS:
                    host_pool.run(
                        target,
                        "systemctl kill --signal=SIGKILL pyinfra-sglang-model-download.service",
                    )
                    cut = size
            time.sleep(0.05)
        applying.join(timeout=300)
        assert cut, first[0].describe() if first else "no partial weights file appeared"
        (killed,) = first
        assert killed.returncode != 0, killed.describe()
        assert "the download failed: the download process ended (signal)" in killed.stderr
        assert "it resumes on the next run" in killed.stderr
        (partial,) = blobs.glob("*.incomplete")
        left = partial.stat().st_size
        assert cut <= left < RESUMABLE_WEIGHTS

        seen = len(hub.requests)
        resumed = apply(inventory, options=options)
        assert resumed.returncode == 0 and not resumed.errors(), resumed.describe()
        assert download in resumed.changed(target.address)
        assert (
            f"{RESUMABLE_MODEL}: complete: " in resumed.stderr and " fetched in " in resumed.stderr
        )
        # The client asked for the rest of the weights only, from where the cut left them.
        gets = [
            rng
            for method, path, rng in hub.requests[seen:]
            if (method, path) == ("GET", weights_url)
        ]
        assert gets == [f"bytes={left}-"], hub.requests[seen:]
        expected = model_files(RESUMABLE_WEIGHTS)
        snapshot = target.root / folder.lstrip("/") / "snapshots" / SITE_MODEL_COMMIT
        assert {p.name: p.stat().st_size for p in snapshot.iterdir()} == {
            name: len(content) for name, content in expected.items()
        }
        assert (snapshot / "model.safetensors").read_bytes() == expected["model.safetensors"]
        assert not list(blobs.glob("*.incomplete"))

        again = apply(inventory, options=options)
        again.assert_unchanged()
        assert download in again.unchanged(target.address)
    finally:
        back = apply(inventory, options=("--limit", target.address))
        assert back.returncode == 0 and not back.errors(), back.describe()
        host_pool.run(target, f"rm -rf {folder}")


def test_fetched_once_a_site_the_second_host_copies_from_the_first_and_never_asks_the_hub(
    host_pool, hosts, inventory, model_hub
):
    hub = model_hub[1]
    seed, other = hosts
    folder = f"{CACHE}/models--test-org--fetch-once-model"
    fetch_once = ("--data", other_model(FETCH_ONCE_MODEL), "--data", "model_fetch_once=true")
    expected = model_files(LFS_THRESHOLD + 1024 * 1024)
    seen = len(hub.requests)
    try:
        # The site hosts share this machine's network namespace, where they may not change
        # the firewall: the seed refuses to serve unfirewalled, and nothing is copied. (The
        # rules themselves: test_multinode_firewall_on_hosts.py, on a private network.)
        refused = apply(inventory, options=fetch_once)
        assert refused.returncode != 0, refused.describe()
        assert f"[{seed.address}] could not load the seed's firewall (nft): " in refused.stderr
        assert "it does not serve unfirewalled" in refused.stderr
        copy = other.root / folder.lstrip("/") / "snapshots" / SITE_MODEL_COMMIT
        assert not copy.exists() or not list(copy.iterdir())
        serving = host_pool.run(seed, "systemctl is-active pyinfra-sglang-model-seed", check=False)
        assert serving.stdout.strip() != "active", serving.stdout
        options = (*fetch_once, "--data", "model_seed_firewall=false")
        fetched = apply(inventory, options=options)
        assert fetched.returncode == 0 and not fetched.errors(), fetched.describe()
        # One operation for both, which pyinfra names after whichever host it planned first.
        named = (f"Download {FETCH_ONCE_MODEL}", f"Copy {FETCH_ONCE_MODEL}")
        for h in hosts:
            assert any(n in " ".join(fetched.changed(h.address)) for n in named), fetched.changed(
                h.address
            )
        assert f"[{seed.address}] serving the snapshot to {other.address}" in fetched.stderr
        assert "(no firewall: model_seed_firewall is false" in fetched.stderr
        # Each file left the Hub once, over both runs: for the seed, which downloaded before
        # it refused to serve. The other host asked it nothing.
        gets = [
            path
            for method, path, _ in hub.requests[seen:]
            if method == "GET" and path.startswith(f"/{FETCH_ONCE_MODEL}/resolve/")
        ]
        assert sorted(gets) == sorted(
            f"/{FETCH_ONCE_MODEL}/resolve/{SITE_MODEL_COMMIT}/{name}" for name in expected
        ), hub.requests[seen:]
        for h in hosts:
            snapshot = h.root / folder.lstrip("/") / "snapshots" / SITE_MODEL_COMMIT
            assert {p.name: p.read_bytes() for p in snapshot.iterdir()} == expected
        copied = host_pool.run(other, "tail -n 1 /var/log/pyinfra-sglang/model-download.log")
        assert "copied from the site's seed" in copied.stdout, copied.stdout
        # The seed stopped serving; the token reached no file left behind or a unit's argv.
        stopped = host_pool.run(seed, "systemctl is-active pyinfra-sglang-model-seed", check=False)
        assert stopped.returncode != 0 and stopped.stdout.strip() != "active", stopped.stdout
        for h in hosts:
            assert host_pool.run(h, "ls -A /run/pyinfra-sglang").stdout.strip() == ""
        apply(inventory, options=options).assert_unchanged()
        # A complete seed serves too: the other host, its copy gone, copies it again.
        host_pool.run(other, f"rm -rf {folder}")
        seen = len(hub.requests)
        again = apply(inventory, options=options)
        assert again.returncode == 0 and not again.errors(), again.describe()
        # (The controller still reads the file list from the Hub's API while planning.)
        resolved = f"/{FETCH_ONCE_MODEL}/resolve/"
        assert not [p for m, p, _ in hub.requests[seen:] if p.startswith(resolved)]
        snapshot = other.root / folder.lstrip("/") / "snapshots" / SITE_MODEL_COMMIT
        assert {p.name: p.read_bytes() for p in snapshot.iterdir()} == expected
    finally:
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()
        for h in hosts:
            host_pool.run(h, f"rm -rf {folder}")
