"""Shared by the scale benchmarks: boot test hosts converged by deploy/site.py (the tests'
stand-ins for NVIDIA's repository, PyPI and SGLang, served locally), time one run of a
deploy REPEAT times per host count (default 1, 4 and 16), print the median and the runs of
each count, the curve (hosts, median, ratio to one host) and the goal line, then trace one
more run at the largest count to show where its time goes (start-up, connect, prepare with
its facts, operations, disconnect), from pyinfra's own phase headers and --debug lines."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.hosts import aptrepo, pyindex
from tests.hosts.apply import PYINFRA, REPO, ApplyResult, apply, write_inventory
from tests.hosts.hubstandin import Hub, Repo
from tests.hosts.hubstandin import serve as serve_hub
from tests.hosts.site_model import SITE_MODEL, SITE_MODEL_COMMIT, model_files
from tests.hosts.testhosts import TestHostPool, why_unavailable

SIZES = (1, 4, 16)
GOAL_RATIO = 2.0  # the largest count may take at most this many times one host's median

# The benchmark's run of one size: ``run(size, inventory, apply)``, where ``apply`` has
# tests.hosts.apply.apply's signature and result; raises SystemExit on a bad run.
Run = Callable[[int, Path, Callable[..., ApplyResult]], None]

# pyinfra's CLI logs these headers (pyinfra_cli/cli.py) as it enters each phase. "--> Loading
# config/inventory" come before connecting and count as start-up (with Python's imports);
# "--> Preparing operation files..." runs the deploy files, which gathers the facts.
PHASE_HEADERS = (
    ("connect", "--> Connecting to hosts"),
    ("prepare", "--> Preparing "),
    ("operations", "--> Beginning operation run"),
    ("results", "--> Results"),
    ("disconnect", "--> Disconnecting from hosts"),
)
BOOT_BATCH = 16  # test hosts booted at a time
CONVERGE_BATCH = 16  # and converged by one first apply
PHASES = ("start-up", *(phase for phase, _ in PHASE_HEADERS))
# What --debug logs once per event (pyinfra/api/facts.py, connectors/ssh.py,
# api/operations.py), counted per phase.
COUNTED = (
    ("facts", "Getting fact: "),
    ("connects", "Connecting to: "),
    ("commands", "Running command on "),
    ("operations", "Starting operation "),
)


@dataclass
class Trace:
    """One pyinfra run's wall time split by phase, with what --debug logged in each."""

    total: float
    seconds: dict[str, float] = field(default_factory=dict)
    counts: dict[str, Counter] = field(default_factory=dict)
    cpu: float = 0.0  # user + system seconds of the pyinfra process (one process, gevent)
    # Remote commands per host (facts, operations' commands, connector helpers) and facts
    # read by fact name, each split by phase, from the --debug lines.
    host_commands: dict[str, Counter] = field(default_factory=dict)
    fact_names: dict[str, Counter] = field(default_factory=dict)
    # Each host's commands in the order sent: (phase, the command as --debug logs it).
    command_texts: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    machine_busy: float = 0.0  # share of all this machine's cores busy during the run

    def count(self, what: str) -> int:
        return sum(counter[what] for counter in self.counts.values())

    def describe(self, hosts: int) -> str:
        s = {phase: self.seconds.get(phase, 0.0) for phase in PHASES}
        facts = {phase: self.counts.get(phase, Counter())["facts"] for phase in PHASES}
        lines = [
            f"where the time goes at {hosts} hosts: connect {s['connect']:.2f} s, "
            f"prepare (facts) {s['prepare']:.2f} s, operations {s['operations']:.2f} s, "
            f"disconnect {s['disconnect']:.2f} s (and exit)",
            f"  (traced run {self.total:.2f} s with --debug; also start-up {s['start-up']:.2f} s "
            f"[interpreter, config, inventory], results {s['results']:.2f} s [JSON])",
            f"  facts gathered: {self.count('facts')} ({facts['prepare']} while preparing, "
            f"{facts['operations']} while executing) = {self.count('facts') / hosts:.1f} a host; "
            f"SSH connects {self.count('connects')}; "
            f"operations executed {self.count('operations')} "
            f"({self.count('operations') / hosts:.1f} a host); "
            f"remote commands {self.count('commands')}",
        ]
        lines.append(
            f"  CPU: pyinfra {self.cpu:.2f} s of {self.total:.2f} s wall "
            f"({self.cpu / self.total:.0%} of one core); this machine's {os.cpu_count()} cores "
            f"{self.machine_busy:.0%} busy (the test hosts' sshd and commands run on them too)"
        )
        lines += self.describe_commands(hosts)
        missing = [phase for phase in PHASES if phase not in self.seconds]
        if missing:
            lines.append(f"  (no header seen for: {', '.join(missing)})")
        return "\n".join(lines)

    def commands_per_host(self) -> float:
        """The median over the hosts of the remote commands each was sent."""
        per_host = Counter()
        for counter in self.host_commands.values():
            per_host.update(counter)
        return statistics.median(per_host.values()) if per_host else 0.0

    def list_commands(self, width: int = 200) -> list[str]:
        """The commands one host (the first traced) was sent, numbered, with their phase."""
        if not self.command_texts:
            return ["  no commands logged"]
        name = sorted(self.command_texts)[0]
        lines = [f"  commands sent to {name}:"]
        for n, (phase, text) in enumerate(self.command_texts[name], 1):
            short = text if len(text) <= width else text[: width - 3] + "..."
            lines.append(f"  {n:3}  {phase:<10}  {short}")
        return lines

    def describe_commands(self, hosts: int, top: int = 12) -> list[str]:
        """Remote commands a host (min, median, max over the hosts; split by phase) and
        the facts read most often, so a change to the roles shows what a no-op host costs."""
        per_host = Counter()
        for counter in self.host_commands.values():
            per_host.update(counter)
        if not per_host:
            return ["  remote commands per host: none logged"]
        counts = sorted(per_host.values())
        phases = ", ".join(
            f"{phase} {sum(c.values()) / hosts:.1f}"
            for phase, c in self.host_commands.items()
            if sum(c.values())
        )
        lines = [
            f"  remote commands per host: median {statistics.median(counts):g} "
            f"(min {counts[0]}, max {counts[-1]}; by phase, a host: {phases})",
        ]
        names = Counter()
        for counter in self.fact_names.values():
            names.update(counter)
        if names:
            executing = self.fact_names.get("operations", Counter())
            lines.append(f"  facts read a host (while preparing + executing), top {top}:")
            for name, n in names.most_common(top):
                lines.append(
                    f"    {n / hosts:5.1f}  {name}  ({executing[name] / hosts:g} while executing)"
                )
        return lines


def _logged_host(line: str, marker: str) -> str | None:
    """The host name in a "Running command on HOST: ..." --debug line."""
    rest = line.split(marker, 1)[1]
    return rest.split(":", 1)[0] if ":" in rest else None


def _logged_command(line: str, marker: str) -> str:
    """The command in a "Running command on HOST: (pty=False) COMMAND" --debug line."""
    rest = line.split(marker, 1)[1].split(": ", 1)[-1].strip()
    return rest.split(") ", 1)[1] if rest.startswith("(pty=") and ") " in rest else rest


def _logged_fact(line: str) -> str:
    """The fact's name in a "Getting fact: NAME (args) ..." --debug line."""
    return line.split("Getting fact: ", 1)[1].split(" (", 1)[0].strip()


def traced_apply(
    inventory: Path | str,
    *operations: str,
    options: tuple[str, ...] = (),
    dry: bool = False,
    timeout: float = 1200,
    stamped: list[tuple[float, str]] | None = None,
) -> tuple[ApplyResult, Trace]:
    """tests.hosts.apply.apply with ``--debug`` added, run through Popen: stderr is read
    line by line as pyinfra writes it, each line stamped with time.monotonic(), so the time
    between pyinfra's phase headers is each phase's wall time. pyinfra is not changed.
    ``stamped``: where given, every stderr line is appended to it with its stamp."""
    operations = operations or ("deploy/site.py",)
    args = [
        str(PYINFRA),
        "-y",
        "--json",
        "--debug",
        *(["--dry"] if dry else []),
        *options,
        str(inventory),
        *operations,
    ]
    env = {**os.environ, "PYINFRA_PROGRESS": "off", "PYTHONUNBUFFERED": "1"}
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = _cpu_busy_idle()
    start = time.monotonic()
    proc = subprocess.Popen(
        args,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    # stdout carries only the JSON report, at the end: read it alongside so a large report
    # cannot fill its pipe while stderr is being read here.
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    marks = [("start-up", start)]
    counts: dict[str, Counter] = {"start-up": Counter()}
    host_commands: dict[str, Counter] = {"start-up": Counter()}
    fact_names: dict[str, Counter] = {"start-up": Counter()}
    command_texts: dict[str, list[tuple[str, str]]] = {}
    stderr = []
    try:
        for line in proc.stderr:
            now = time.monotonic()
            stderr.append(line)
            if stamped is not None:
                stamped.append((now, line))
            phase = next((name for name, header in PHASE_HEADERS if header in line), None)
            if phase is not None:
                marks.append((phase, now))
                counts[phase] = Counter()
                host_commands[phase] = Counter()
                fact_names[phase] = Counter()
                continue
            current = marks[-1][0]
            for what, marker in COUNTED:
                if marker in line:
                    counts[current][what] += 1
                    if what == "commands" and (name := _logged_host(line, marker)):
                        host_commands[current][name] += 1
                        command_texts.setdefault(name, []).append(
                            (current, _logged_command(line, marker))
                        )
                    elif what == "facts":
                        fact_names[current][_logged_fact(line)] += 1
        proc.wait()
    finally:
        killer.cancel()
    end = time.monotonic()
    busy_end = _cpu_busy_idle()
    children_end = resource.getrusage(resource.RUSAGE_CHILDREN)
    reader.join()
    ends = [at for _, at in marks[1:]] + [end]
    seconds = {phase: stop - at for (phase, at), stop in zip(marks, ends)}
    out = "".join(stdout)
    try:
        report = json.loads(out) if out.strip() else None
    except json.JSONDecodeError:
        report = None
    result = ApplyResult(args, proc.returncode, out, "".join(stderr), report)
    # Only pyinfra was reaped meanwhile (its SSH is paramiko, in process): the children's
    # CPU time grew by pyinfra's.
    cpu = (children_end.ru_utime - children.ru_utime) + (children_end.ru_stime - children.ru_stime)
    busy_ticks, idle_ticks = (b - a for a, b in zip(busy, busy_end))
    return result, Trace(
        total=end - start,
        seconds=seconds,
        counts=counts,
        cpu=cpu,
        machine_busy=busy_ticks / max(1, busy_ticks + idle_ticks),
        host_commands=host_commands,
        fact_names=fact_names,
        command_texts=command_texts,
    )


def _cpu_busy_idle() -> tuple[int, int]:
    """All cores' busy and idle clock ticks so far, from /proc/stat."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks[:8]) - idle, idle


def trace_run(run: Run, size: int, inventory: Path, log: Path | None = None) -> Trace:
    """Run the benchmark's ``run`` once with traced_apply in place of apply (its checks of
    the result still apply) and return the trace of its one pyinfra run; ``log`` keeps
    its --debug output."""
    traces: list[Trace] = []

    def traced(*args, **kwargs) -> ApplyResult:
        result, trace = traced_apply(*args, **kwargs)
        traces.append(trace)
        if log is not None:
            log.write_text(result.stderr)
        return result

    run(size, inventory, traced)
    if len(traces) != 1:
        raise SystemExit(f"expected one pyinfra run to trace, got {len(traces)}")
    return traces[0]


@dataclass
class CpuAccount:
    """One run's CPU seconds: pyinfra's (the controller) and all this machine's cores'
    (pyinfra, the test hosts' sshd, shells and commands, anything else running)."""

    hosts: int
    wall: float
    pyinfra: float
    machine: float

    def row(self) -> str:
        rest = max(0.0, self.machine - self.pyinfra)
        return (
            f"{self.hosts:6} {self.wall:8.2f} {self.pyinfra:9.2f} {self.pyinfra / self.hosts:9.3f}"
            f" {self.machine:9.2f} {rest:9.2f} {rest / self.hosts:9.3f}"
        )


CPU_HEADER = (
    " hosts   wall s  pyinfra  a host    machine   hosts'   a host\n"
    "                   CPU s   CPU s      CPU s    CPU s    CPU s"
)


def cpu_account(run: Run, size: int, inventory: Path) -> CpuAccount:
    """``run`` once at ``size`` hosts (no --debug), its CPU accounted: pyinfra's from the
    children's rusage (the only child reaped meanwhile), the machine's from /proc/stat; the
    rest is the test hosts' side (sshd, shells, fact commands) and whatever else ran."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = _cpu_busy_idle()
    start = time.monotonic()
    run(size, inventory, apply)
    wall = time.monotonic() - start
    busy_end = _cpu_busy_idle()
    end = resource.getrusage(resource.RUSAGE_CHILDREN)
    pyinfra = (end.ru_utime - children.ru_utime) + (end.ru_stime - children.ru_stime)
    ticks = busy_end[0] - busy[0]
    return CpuAccount(size, wall, pyinfra, ticks / os.sysconf("SC_CLK_TCK"))


def profiled_apply(inventory: Path, out: Path, top: int = 30) -> str:
    """A no-change apply under cProfile (pyinfra's CLI script run by this Python): the
    functions with the most time of their own, for where the controller's CPU goes."""
    args = [sys.executable, "-m", "cProfile", "-o", str(out), str(PYINFRA), "-y", str(inventory)]
    args.append("deploy/site.py")
    env = {**os.environ, "PYINFRA_PROGRESS": "off"}
    subprocess.run(args, cwd=REPO, check=True, capture_output=True, env=env, timeout=1200)
    buffer = io.StringIO()
    stats = pstats.Stats(str(out), stream=buffer)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return buffer.getvalue()


def timed(run: Callable[[], None], repeat: int) -> list[float]:
    """Wall times of ``repeat`` calls of ``run`` (which raises SystemExit on a bad run)."""
    times = []
    for _ in range(repeat):
        start = time.monotonic()
        run()
        times.append(time.monotonic() - start)
    return times


def print_scale(inventories: dict[int, Path], run: Run, repeat: int) -> dict[int, float]:
    """Time ``run(size, inventory, apply)`` for each host count; print each count's median
    and runs as it finishes, then the curve and the goal line. Returns the medians."""
    medians = {}
    for size, inventory in inventories.items():
        runs = timed(lambda size=size, inventory=inventory: run(size, inventory, apply), repeat)
        medians[size] = statistics.median(runs)
        run_times = ", ".join(f"{t:.2f}" for t in runs)
        print(f"{size} host(s): median {medians[size]:.2f} s  (runs: {run_times})", flush=True)
    base, largest = min(medians), max(medians)
    print()
    print(f"{'hosts':>5}  {'median s':>8}  ratio to {base} host{'s' if base > 1 else ''}")
    for size, median in medians.items():
        print(f"{size:>5}  {median:>8.2f}  {median / medians[base]:>5.2f}")
    ratio = medians[largest] / medians[base]
    print(f"{largest} hosts / {base} host = {ratio:.2f} (goal <= {GOAL_RATIO})", flush=True)
    return medians


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of counts: {text!r}") from err
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"host counts must be >= 1: {text!r}")
    return tuple(sizes)


@dataclass
class Site:
    """Test hosts converged by deploy/site.py, and inventories of any of them."""

    hosts: list
    data: dict
    workdir: Path
    hub: Hub | None = None  # the Hub stand-in, whose requests tell what left it

    def inventory(self, name: str, hosts: Sequence, **extra) -> Path:
        """An inventory of ``hosts`` with the site's data and ``extra``: each host serves
        SGLang on its own address (test hosts share this machine's network)."""
        entries = [(h.address, {**self.data, **extra, "sglang_host": h.address}) for h in hosts]
        return write_inventory(self.workdir / f"{name}.py", {"gpu_hosts": entries})


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_HOST = 16  # a test host's systemd, journald and logind, with room


def enough_inotify(count: int) -> None:
    """Each test host's systemd takes inotify instances of the one root user all hosts share;
    Linux's default of 128 stops the twentieth or so from booting (it never opens SSH).
    Raised for this machine's kernel where it is lower than ``count`` hosts need, and said."""
    needed = count * INOTIFY_PER_HOST
    present = int(INOTIFY_INSTANCES.read_text())
    if present < needed:
        INOTIFY_INSTANCES.write_text(f"{needed}\n")
        print(f"raised fs.inotify.max_user_instances {present} -> {needed} for {count} hosts")


@contextmanager
def converged_site(
    count: int,
    first_apply: Callable[..., ApplyResult] = apply,
    model_bytes: int = 1024 * 1024,
    uplink_bytes_per_s: int | None = None,
    **extra,
) -> Iterator[Site]:
    """``count`` test hosts booted and converged by deploy/site.py against the tests'
    stand-ins (NVIDIA's repository, PyPI, the Hugging Face Hub with the dense-bf16 profile's
    model, SGLang), all served locally, by ``first_apply`` (a traced one, to time the first
    deploy); the hosts are stopped at the end. ``model_bytes``: the model's weights file;
    ``uplink_bytes_per_s``: the Hub's one shared pipe (unset: loopback's speed)."""
    reason = why_unavailable()
    if reason:
        raise SystemExit(f"cannot boot test hosts: {reason}")
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        workdir = Path(folder)
        mirror = aptrepo.build_repo(workdir / "mirror")
        index = pyindex.build_index(workdir / "index")
        pool = TestHostPool(workdir / "hosts")
        hub = Hub(
            {
                SITE_MODEL: Repo(
                    commits={SITE_MODEL_COMMIT: model_files(model_bytes)},
                    refs={"main": SITE_MODEL_COMMIT},
                )
            },
            uplink_bytes_per_s=uplink_bytes_per_s,
        )
        with (
            aptrepo.serve(mirror.root) as mirror_url,
            aptrepo.serve(index.root) as index_url,
            serve_hub(hub) as hub_url,
        ):
            urls = pyindex.Index(url=index_url, root=index.root)
            data = {
                **pool.inventory_data(),
                "nvidia_apt_mirror": mirror_url,
                "nvidia_keyring_sha256": hashlib.sha256(
                    (mirror.root / "debian12/x86_64/cuda-keyring_1.1-1_all.deb").read_bytes()
                ).hexdigest(),
                "pypi_index_url": urls.pypi_url,
                "torch_index_url": urls.torch_url,
                "python_version": "3.11",  # Debian 12's own: uv downloads no interpreter
                "sglang_model_profile": "dense-bf16",
                "hf_endpoint": hub_url,
                "sglang_model_revision": SITE_MODEL_COMMIT,
                **extra,
            }
            try:
                start = time.monotonic()
                enough_inotify(count)
                # In batches: 64 hosts booting at once on 2 cores miss the boot timeout.
                hosts = []
                while len(hosts) < count:
                    hosts += pool.boot(min(BOOT_BATCH, count - len(hosts)))
                print(f"booted {count} test hosts in {time.monotonic() - start:.1f} s")
                site = Site(hosts, data, workdir, hub)
                start = time.monotonic()
                # In batches too: 64 first deploys at once on 2 cores lose SSH sessions.
                for first in range(0, count, CONVERGE_BATCH):
                    batch = hosts[first : first + CONVERGE_BATCH]
                    everyone = site.inventory(f"hosts{count}-converge-{first}", batch)
                    converge = first_apply(everyone, timeout=max(1200, 120 * len(batch)))
                    if converge.returncode != 0:
                        raise SystemExit(f"deploy/site.py failed:\n{converge.describe()}")
                print(
                    f"converged {count} hosts with deploy/site.py in "
                    f"{time.monotonic() - start:.1f} s",
                    flush=True,
                )
                yield site
            finally:
                pool.stop_all()


def main(description: str, run: Run, argv: Sequence[str] | None = None) -> int:
    """A scale benchmark's command line: ``[--repeat N] [--sizes 1,4,16]``; boots the
    largest count of hosts, converges them, writes one inventory per count, times ``run`` on
    each, then traces one more run at the largest count."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=SIZES,
        help="comma-separated host counts (default: 1,4,16)",
    )
    parser.add_argument(
        "--no-trace", action="store_true", help="skip the traced run at the largest count"
    )
    parser.add_argument(
        "--trace-log", type=Path, help="write the traced run's --debug output to this file"
    )
    parser.add_argument(
        "--list-commands",
        action="store_true",
        help="list the commands the traced run sent one host",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of an earlier tree (git worktree add DIR COMMIT): its deploy is "
        "timed and traced first, on the same converged hosts, for a before/after",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="account one more run at each count: pyinfra's CPU seconds and the machine's",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run pyinfra under cProfile once at the largest count, write its stats here and "
        "print the top functions",
    )
    args = parser.parse_args(argv)
    sizes: tuple[int, ...] = args.sizes
    reason = why_unavailable()
    if reason:
        print(f"cannot boot test hosts: {reason}", file=sys.stderr)
        return 2
    largest = max(sizes)
    trees = {"before": args.before.resolve(), "after": REPO} if args.before else {"": REPO}
    with converged_site(largest) as site:
        inventories = {size: site.inventory(f"hosts{size}", site.hosts[:size]) for size in sizes}
        summaries = []
        for label, tree in trees.items():
            with deploy_tree(tree):
                if label:
                    print(f"\n== {label}: {tree}", flush=True)
                medians = print_scale(inventories, run, args.repeat)
                if args.cpu:
                    print(f"\nCPU of one more run at each count ({os.cpu_count()} cores)")
                    print(CPU_HEADER)
                    for size in sizes:
                        print(cpu_account(run, size, inventories[size]).row(), flush=True)
                if args.profile:
                    print(profiled_apply(inventories[largest], args.profile), flush=True)
                if args.no_trace:
                    continue
                log = args.trace_log
                if log is not None and label:
                    log = log.with_name(f"{log.stem}-{label}{log.suffix}")
                trace = trace_run(run, largest, inventories[largest], log)
                print(trace.describe(largest))
                if args.list_commands:
                    print("\n".join(trace.list_commands()))
                # The count: pyinfra's --debug "Running command on HOST" lines, one per shell
                # command its connector sends (fact reads and operations' commands alike).
                base = min(medians)
                summaries.append(
                    f"summary{f' ({label})' if label else ''}: "
                    f"{trace.commands_per_host():g} remote commands a host (traced run at "
                    f"{largest} hosts); {largest} hosts / {base} host = "
                    f"{medians[largest] / medians[base]:.2f}"
                )
        print("\n" + "\n".join(summaries), flush=True)
    return 0


@contextmanager
def deploy_tree(tree: Path) -> Iterator[None]:
    """Run pyinfra from ``tree`` (a checkout of another commit) with its modules first on
    the path, so its deploy, roles and core are the ones timed; this tree's otherwise."""
    import tests.hosts.apply as applying

    global REPO
    saved = REPO, applying.REPO, os.environ.get("PYTHONPATH")
    REPO = applying.REPO = tree
    os.environ["PYTHONPATH"] = str(tree)
    try:
        yield
    finally:
        REPO, applying.REPO, path = saved
        if path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = path
