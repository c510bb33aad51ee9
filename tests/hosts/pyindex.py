"""A stand-in for PyPI and PyTorch's wheel index: two PEP 503 "simple" indexes on loopback.

``build_index(root)`` lays out, under root::

    pypi/simple/index.html               every project, linked
    pypi/simple/<project>/index.html     its files, linked relatively with #sha256=
    pypi/files/<wheel or sdist>
    torch/simple/...  torch/files/...    the same, for the torch index

The PyPI index holds real wheels of uv and flash-attn's build tools, downloaded from PyPI
once and cached in ``cache_dir()/wheels``, and stand-ins with real names built here from
``standins/``: sglang wheels (a small HTTP server, ``python -m sglang.launch_server``, and its
serving benchmark), an nvidia-ml-py wheel (pynvml replaying a real capture), an
sglang-router wheel (``python -m sglang_router.launch_router``), flash-attn sdists, and the
kernel, torch, torchvision and torchaudio as PyPI has them (PyPI's torch is itself a CUDA 13.0
build, without a local label). The torch index holds the stand-in CUDA builds of torch,
torchvision and torchaudio (``+cu130``) and, as PyTorch's real cu130 index does, an old
``sglang`` (0.5.2): a command that lets uv see both indexes for ``sglang`` finds only that
one. The sglang stand-ins require what the real releases' METADATA does (data/python.toml
[sglang] stacks). Serve the root with ``aptrepo.serve()``;
``Index`` gives the two URLs that pip's and uv's --index-url / --extra-index-url take.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import io
import json
import os
import re
import shutil
import tarfile
import urllib.parse
import urllib.request
import zipfile
from base64 import urlsafe_b64encode
from dataclasses import dataclass
from pathlib import Path

from pyinfra_sglang.python_env.python_stack import stack_for
from tests.hosts.testhosts import cache_dir

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "standins"
REPO = HERE.parents[1]
PYPI_SIMPLE = "https://pypi.org/simple"
INDEXES = ("pypi", "torch")
# Stand-in archives are reproducible: the same sources give the same bytes and hashes.
EPOCH = (1980, 1, 1, 0, 0, 0)

# Real wheels the PyPI index serves: exact files from PyPI, checked against these sha256.
# uv, psutil and ninja are the x86_64 manylinux builds a Debian 12 host (glibc 2.36) takes.
REAL_WHEELS = {
    "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl": (
        "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19"
    ),
    "setuptools-84.2.1-py3-none-any.whl": (
        "ca140b45d5325a9478f880e351484f62fef15f336462e449ca0c03c873d589c2"
    ),
    # pip builds flash-attn's wheel in the venv (roles/flash_attn.py).
    "pip-26.3-py3-none-any.whl": (
        "f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13"
    ),
    "wheel-0.48.0-py3-none-any.whl": (
        "3217dcc807155e45db462d7ef2431f5ddda0d7273b700d05a67b271ceb1287ab"
    ),
    "packaging-26.4-py3-none-any.whl": (
        "81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2"
    ),
    (
        "psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64."
        "manylinux_2_28_x86_64.whl"
    ): "076a2d2f923fd4821644f5ba89f059523da90dc9014e85f8e45a5774ca5bc6f9",
    "ninja-1.13.2-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl": (
        "65a24341b5ac09fcadcc37082660be40a94174e51a937fabf6e2cae26225fa2c"
    ),
    # The real Hugging Face Hub client (the line SGLang's transformers pins) and what it
    # needs on CPython 3.11: the model role downloads with the venv's huggingface_hub.
    "huggingface_hub-0.36.2-py3-none-any.whl": (
        "48f0c8eac16145dfce371e9d2d7772854a4f591bcb56c9cf548accf531d54270"
    ),
    "certifi-2026.10.19.post1-py3-none-any.whl": (
        "1324c476b4811eff41a8bc2122cd0bbd4d9c7234c725446d99ab1612b3a7fdd2"
    ),
    (
        "charset_normalizer-3.5.3-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64."
        "manylinux_2_5_x86_64.whl"
    ): "2a6f937e0b70133d1f826d0a253331b6fe1a4c874808cc12e16f2fb8177042f4",
    "filelock-4.3.1-py3-none-any.whl": (
        "79e43df8e9fe509cd83a3899a7c186c8077cbbe4d200a1ed3705c2f3bb6bc487"
    ),
    "fsspec-2026.9.0-py3-none-any.whl": (
        "8dd6e646e99ea382bd85f97a45e6b526a442d79423a7dc673f1e2756d05fcb5f"
    ),
    "hf_xet-1.8.0-cp38-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl": (
        "29dab7c904cd1914a0439c6e1306c12c7497c8bd32290fbe563ebf51ca4b6d6d"
    ),
    "idna-3.20-py3-none-any.whl": (
        "ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c"
    ),
    (
        "pyyaml-6.0.4-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64."
        "manylinux_2_28_x86_64.whl"
    ): "622aa875fa6533f25fedcffe23079357d65a690d462200afed5d8e9d0e01ebee",
    "requests-2.34.2-py3-none-any.whl": (
        "2a0d60c172f83ac6ab31e4554906c0f3b3588d37b5cb939b1c061f4907e278e0"
    ),
    "tqdm-4.70.1-py3-none-any.whl": (
        "c293e525e6fef9c20e8728fd4612df02a0aa31bb5fe91ecd93e123b1b7bffa73"
    ),
    "typing_extensions-4.16.0-py3-none-any.whl": (
        "481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8"
    ),
    "urllib3-2.8.0-py3-none-any.whl": (
        "0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3"
    ),
}


@dataclass(frozen=True)
class StandIn:
    """A test package with a real project's name: its metadata and where its sources are."""

    name: str  # as the real project's metadata spells it
    version: str
    index: str  # "pypi" or "torch"
    package: str  # the import package; it gets a generated version.py
    templates: tuple[str, ...]  # folders under standins/; a later one replaces earlier files
    sdist: bool = False  # an sdist to build on the host, else a py3-none-any wheel
    requires: tuple[str, ...] = ()  # Requires-Dist
    version_py: tuple[tuple[str, str], ...] = ()  # more names for version.py, beside __version__
    # Files from elsewhere in the repository: (path in the archive, path under the repo root).
    extras: tuple[tuple[str, str], ...] = ()
    # A wheel's console scripts: (name, "module:function"), as entry_points.txt has them.
    scripts: tuple[tuple[str, str], ...] = ()

    @property
    def filename(self) -> str:
        stem = f"{re.sub(r'[-_.]+', '_', self.name)}-{self.version}"
        return f"{stem}.tar.gz" if self.sdist else f"{stem}-py3-none-any.whl"


# pynvml replays the 2x H200 capture, as the test double tests/doubles/pynvml.py does (it is
# that double, with the capture packaged beside it).
NVML_CAPTURE = "tests/fixtures/gpu/h200x2-nvlink-vm"
NVIDIA_ML_PY = StandIn(
    "nvidia-ml-py",
    "13.615.71",
    "pypi",
    "pynvml",
    ("nvidia-ml-py",),
    extras=(
        ("pynvml/_double.py", "tests/doubles/pynvml.py"),
        *(
            (f"pynvml/capture/{name}", f"{NVML_CAPTURE}/{name}")
            for name in ("nvml.json", "samples.json", "smi_q.txt")
        ),
    ),
)


def flash_attn(version: str, *templates: str) -> StandIn:
    return StandIn(
        "flash_attn",
        version,
        "pypi",
        "flash_attn",
        ("flash-attn", *templates),
        sdist=True,
        requires=("torch",),
    )


def sglang_requires(version: str) -> tuple[str, ...]:
    """What the real release's METADATA requires of the stand-ins here: its torch, torchaudio
    and kernel pins, torchvision unpinned; and nvidia-ml-py (the benchmark's GPU sampler
    imports it) and, through transformers, huggingface_hub (the model role downloads with it)."""
    stack = stack_for(version)
    return (
        f"torch=={stack.torch}",
        "torchvision",
        f"torchaudio=={stack.torchaudio}",
        f"{stack.kernel}=={stack.kernel_version}",
        "nvidia-ml-py",
        "huggingface_hub<1.0",
    )


def empty(name: str, version: str, index: str, package: str, *requires: str) -> StandIn:
    """A package with a real name and only its version.py: what is installed from where is
    all the tests look at."""
    return StandIn(name, version, index, package, (), requires=requires)


STAND_INS = (
    *(
        StandIn("sglang", version, "pypi", "sglang", ("sglang",), requires=sglang_requires(version))
        for version in ("0.5.22", "0.5.23")
    ),
    # PyTorch's cu130 index mirrors an sglang of its own (0.5.2, SGLang PR #18404).
    empty("sglang", "0.5.2", "torch", "sglang"),
    empty("sglang-kernel", "0.4.9", "pypi", "sgl_kernel", "torch==2.14.1"),
    empty("sglang-kernel", "0.4.10", "pypi", "sgl_kernel", "torch==2.14.1"),
    NVIDIA_ML_PY,
    # The SGLang Model Gateway; the real project is a Rust extension, this one pure Python.
    # 0.3.2: the release data/python.toml pins for SGLang 0.5.8 and later (0.5.22, 0.5.23).
    StandIn("sglang-router", "0.3.2", "pypi", "sglang_router", ("sglang-router",)),
    # smg, the gateway's continuation: 1.13.0 is what data/python.toml pins for SGLang 0.5.22
    # and later. Its gateway is sglang-router's stand-in (the same flags), under smg's CLI and
    # its real console script `smg = smg.cli:main`.
    StandIn(
        "smg",
        "1.13.0",
        "pypi",
        "smg",
        ("smg",),
        extras=(
            (
                "smg/launch_router.py",
                "tests/hosts/standins/sglang-router/sglang_router/launch_router.py",
            ),
        ),
        scripts=(("smg", "smg.cli:main"),),
    ),
    flash_attn("2.8.3"),
    flash_attn("2.8.2"),
    # Its build logs kernel after kernel, then fails: for showing a failed build's log.
    flash_attn("2.7.4", "flash-attn-nvcc-killed"),
    StandIn("torch", "2.14.1+cu130", "torch", "torch", ("torch",), version_py=(("cuda", "13.0"),)),
    empty("torchvision", "0.29.1+cu130", "torch", "torchvision", "torch>=2.14.0"),
    empty("torchaudio", "2.11.0+cu130", "torch", "torchaudio"),
    # PyPI's own builds of the same releases: taken only if the torch step did not run first.
    StandIn("torch", "2.14.1", "pypi", "torch", ("torch",), version_py=(("cuda", "13.0"),)),
    empty("torchvision", "0.29.1", "pypi", "torchvision", "torch>=2.14.0"),
    empty("torchaudio", "2.11.0", "pypi", "torchaudio"),
)


@dataclass(frozen=True)
class BuiltIndex:
    root: Path

    def files(self, index: str) -> Path:
        return self.root / index / "files"

    def simple(self, index: str) -> Path:
        return self.root / index / "simple"


@dataclass(frozen=True)
class Index:
    """A built index being served: what tests pass as --index-url and --extra-index-url."""

    url: str  # http://127.0.0.1:PORT, no trailing slash
    root: Path

    @property
    def pypi_url(self) -> str:
        return f"{self.url}/pypi/simple"

    @property
    def torch_url(self) -> str:
        return f"{self.url}/torch/simple"


def normalize(name: str) -> str:
    """PEP 503's project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str:
    """The normalized project name of a wheel or sdist file name."""
    if filename.endswith(".whl"):
        return normalize(filename.split("-")[0])
    return normalize(filename.removesuffix(".tar.gz").rsplit("-", 1)[0])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------
# Real wheels


def fetch_real_wheel(filename: str, digest: str) -> Path:
    """The wheel from the cache, downloaded from PyPI on first use and checked by sha256."""
    cached = cache_dir() / "wheels" / filename
    if cached.is_file() and sha256(cached.read_bytes()) == digest:
        return cached
    request = urllib.request.Request(
        f"{PYPI_SIMPLE}/{project_of(filename)}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        listing = json.load(response)
    [url] = [f["url"] for f in listing["files"] if f["filename"] == filename]
    with urllib.request.urlopen(url, timeout=300) as response:
        data = response.read()
    if sha256(data) != digest:
        raise RuntimeError(f"{url}: sha256 {sha256(data)}, pinned {digest}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    # Named by process: two shards (tests/sharding.py) may fetch the same wheel at once.
    partial = cached.with_name(f"{filename}.{os.getpid()}.partial")
    partial.write_bytes(data)
    partial.rename(cached)  # another run reading it sees a whole file or none
    return cached


# ---------------------------------------------------------------------------------------
# Stand-ins


def source_files(spec: StandIn) -> dict[str, bytes]:
    """Relative path -> content: the templates, the extras, then the generated version.py."""
    files: dict[str, bytes] = {}
    for template in spec.templates:
        folder = STANDINS / template
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[path.relative_to(folder).as_posix()] = path.read_bytes()
    for destination, source in spec.extras:
        files[destination] = (REPO / source).read_bytes()
    names = (("__version__", spec.version), *spec.version_py)
    assignments = "".join(f"{name} = {value!r}\n" for name, value in names)
    version_py = f'"""Generated by tests/hosts/pyindex.py."""\n\n{assignments}'
    files[f"{spec.package}/version.py"] = version_py.encode()
    return files


def core_metadata(spec: StandIn) -> str:
    """METADATA of a wheel, PKG-INFO of an sdist."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {spec.name}",
        f"Version: {spec.version}",
        f"Summary: {spec.name} (test stand-in, not the real project)",
        "Requires-Python: >=3.9",
        *(f"Requires-Dist: {requirement}" for requirement in spec.requires),
    ]
    return "\n".join(lines) + "\n"


def build_wheel(spec: StandIn, out_dir: Path) -> Path:
    dist_info = spec.filename.split("-py3-")[0] + ".dist-info"
    files = source_files(spec)
    files[f"{dist_info}/METADATA"] = core_metadata(spec).encode()
    if spec.scripts:
        lines = "".join(f"{name} = {target}\n" for name, target in spec.scripts)
        files[f"{dist_info}/entry_points.txt"] = f"[console_scripts]\n{lines}".encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: pyinfra-sglang tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    record = [
        f"{path},sha256={urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}"
        for path, data in files.items()
    ]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    wheel = out_dir / spec.filename
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, EPOCH)
            info.external_attr = 0o644 << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return wheel


def build_sdist(spec: StandIn, out_dir: Path) -> Path:
    top = spec.filename.removesuffix(".tar.gz")
    files = {**source_files(spec), "PKG-INFO": core_metadata(spec).encode()}
    sdist = out_dir / spec.filename
    with open(sdist, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for path, data in sorted(files.items()):
                info = tarfile.TarInfo(f"{top}/{path}")
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
    return sdist


# ---------------------------------------------------------------------------------------
# Index pages


def page(title: str, links: list[tuple[str, str]]) -> str:
    anchors = "".join(
        f'<a href="{html.escape(href)}">{html.escape(text)}</a><br>\n' for href, text in links
    )
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        '<meta name="pypi:repository-version" content="1.0">\n'
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n{anchors}</body>\n</html>\n"
    )


def write_simple_index(simple: Path, files: list[Path]) -> None:
    """simple/index.html and simple/<project>/index.html for files in simple/../files/."""
    projects: dict[str, list[Path]] = {}
    for path in sorted(files, key=lambda p: p.name):
        projects.setdefault(project_of(path.name), []).append(path)
    for project, paths in projects.items():
        links = [
            (f"../../files/{urllib.parse.quote(p.name)}#sha256={sha256(p.read_bytes())}", p.name)
            for p in paths
        ]
        (simple / project).mkdir(parents=True)
        (simple / project / "index.html").write_text(page(f"Links for {project}", links))
    listing = page("Simple index", [(f"{project}/", project) for project in sorted(projects)])
    (simple / "index.html").write_text(listing)


def build_index(root: Path) -> BuiltIndex:
    """Build both indexes under root (an empty or missing folder); real wheels come from
    the cache, downloaded from PyPI the first time."""
    built = BuiltIndex(root)
    for index in INDEXES:
        built.files(index).mkdir(parents=True)
    files: dict[str, list[Path]] = {index: [] for index in INDEXES}
    for filename, digest in REAL_WHEELS.items():
        copy = built.files("pypi") / filename
        shutil.copyfile(fetch_real_wheel(filename, digest), copy)
        files["pypi"].append(copy)
    for spec in STAND_INS:
        build = build_sdist if spec.sdist else build_wheel
        files[spec.index].append(build(spec, built.files(spec.index)))
    for index in INDEXES:
        write_simple_index(built.simple(index), files[index])
    return built
