"""The local Python index: PEP 503 pages, the real wheels it pins, and the stand-ins it builds
(sglang and torch wheels, flash-attn sdists), read as pip and uv would read them."""

from __future__ import annotations

import base64
import csv
import hashlib
import html.parser
import io
import re
import subprocess
import sys
import tarfile
import urllib.parse
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.hosts import pyindex

PYPI_PROJECTS = [
    "certifi",
    "charset-normalizer",
    "filelock",
    "flash-attn",
    "fsspec",
    "hf-xet",
    "huggingface-hub",
    "idna",
    "ninja",
    "nvidia-ml-py",
    "packaging",
    "pip",
    "psutil",
    "pyyaml",
    "requests",
    "setuptools",
    "sglang",
    "sglang-kernel",
    "sglang-router",
    "smg",
    "torch",
    "torchaudio",
    "torchvision",
    "tqdm",
    "typing-extensions",
    "urllib3",
    "uv",
    "wheel",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> pyindex.BuiltIndex:
    return pyindex.build_index(tmp_path_factory.mktemp("python-index"))


class Links(html.parser.HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs)["href"]

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((self._href, data))
            self._href = None


def links(page: Path) -> list[tuple[str, str]]:
    return Links(page.read_text()).links


def metadata(text: str):
    return Parser().parsestr(text)


def wheel_metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        # The top-level .dist-info: setuptools' wheel holds its vendored packages' too.
        [path] = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        return metadata(archive.read(path).decode())


def sdist_members(sdist: Path) -> dict[str, bytes]:
    with tarfile.open(sdist) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


@pytest.mark.parametrize(
    ("index", "projects"),
    [
        ("pypi", PYPI_PROJECTS),
        # PyTorch's index mirrors an old sglang of its own, as the real cu130 index does.
        ("torch", ["sglang", "torch", "torchaudio", "torchvision"]),
    ],
)
def test_pages_link_every_file_by_relative_url_with_its_sha256(built, index, projects):
    simple = built.simple(index)
    assert links(simple / "index.html") == [(f"{p}/", p) for p in projects]
    assert sorted(p.name for p in simple.iterdir() if p.is_dir()) == projects
    linked = []
    for project in projects:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", project)  # PEP 503-normalized
        page = simple / project / "index.html"
        for href, text in links(page):
            url = urllib.parse.urlsplit(href)
            assert not url.scheme and not url.netloc, href  # relative: works on any port
            target = (page.parent / urllib.parse.unquote(url.path)).resolve()
            assert target.is_file() and target.name == text
            assert pyindex.project_of(text) == project
            assert url.fragment == f"sha256={hashlib.sha256(target.read_bytes()).hexdigest()}"
            linked.append(target)
    files = built.files(index)
    assert sorted(linked) == sorted(files.iterdir())  # each file linked once, none missing


def test_real_wheels_are_the_pinned_files(built):
    versions = {
        metadata_["Name"]: metadata_["Version"]
        for metadata_ in map(wheel_metadata, built.files("pypi").glob("*.whl"))
        if "test stand-in" not in metadata_["Summary"]
    }
    assert versions == {
        "uv": "0.13.9",
        "setuptools": "84.2.1",
        "wheel": "0.48.0",
        "packaging": "26.4",
        "pip": "26.3",
        "psutil": "7.2.2",
        "ninja": "1.13.2",
        # huggingface_hub and what it needs, for the model role's download
        "huggingface_hub": "0.36.2",
        "certifi": "2026.10.19.post1",
        "charset-normalizer": "3.5.3",
        "filelock": "4.3.1",
        "fsspec": "2026.9.0",
        "hf-xet": "1.8.0",
        "idna": "3.20",
        "PyYAML": "6.0.4",
        "requests": "2.34.2",
        "tqdm": "4.70.1",
        "typing_extensions": "4.16.0",
        "urllib3": "2.8.0",
    }
    for filename, digest in pyindex.REAL_WHEELS.items():
        data = (built.files("pypi") / filename).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest
    assert (pyindex.cache_dir() / "wheels").is_dir()


@pytest.mark.parametrize(
    ("index", "filename", "name", "version", "requires"),
    [
        *(
            (
                "pypi",
                f"sglang-{version}-py3-none-any.whl",
                "sglang",
                version,
                # as the real release's METADATA pins them
                [
                    "torch==2.14.1",
                    "torchvision",
                    "torchaudio==2.11.0",
                    f"sglang-kernel=={kernel}",
                    "nvidia-ml-py",
                    "huggingface_hub<1.0",
                ],
            )
            for version, kernel in (("0.5.22", "0.4.9"), ("0.5.23", "0.4.10"))
        ),
        ("torch", "sglang-0.5.2-py3-none-any.whl", "sglang", "0.5.2", None),
        (
            "torch",
            "torchvision-0.29.1+cu130-py3-none-any.whl",
            "torchvision",
            "0.29.1+cu130",
            ["torch>=2.14.0"],
        ),
        ("pypi", "torch-2.14.1-py3-none-any.whl", "torch", "2.14.1", None),
        ("pypi", "nvidia_ml_py-13.615.71-py3-none-any.whl", "nvidia-ml-py", "13.615.71", None),
        ("pypi", "sglang_router-0.3.2-py3-none-any.whl", "sglang-router", "0.3.2", None),
        ("torch", "torch-2.14.1+cu130-py3-none-any.whl", "torch", "2.14.1+cu130", None),
    ],
)
def test_stand_in_wheels(built, index, filename, name, version, requires):
    wheel = built.files(index) / filename
    found = wheel_metadata(wheel)
    assert (found["Name"], found["Version"]) == (name, version)
    assert found.get_all("Requires-Dist") == requires
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
        assert "Tag: py3-none-any" in archive.read(f"{dist_info}/WHEEL").decode()
        record = list(csv.reader(io.StringIO(archive.read(f"{dist_info}/RECORD").decode())))
        assert sorted(row[0] for row in record) == sorted(names)
        for path, digest, size in record:
            if path.endswith("RECORD"):
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert (digest, size) == (f"sha256={expected.decode()}", str(len(data)))


def test_stand_in_wheels_import(built, tmp_path):
    # Pure Python: importable straight from the wheels, in a fresh interpreter.
    wheels = [
        built.files("pypi") / "sglang-0.5.23-py3-none-any.whl",
        built.files("pypi") / "sglang_router-0.3.2-py3-none-any.whl",
        built.files("torch") / "torch-2.14.1+cu130-py3-none-any.whl",
    ]
    code = (
        f"import sys; sys.path[:0] = {list(map(str, wheels))!r}; "
        "import sglang, sglang_router, torch; import sglang.launch_server, "
        "sglang_router.launch_router; print(sglang.__version__, sglang_router.__version__, "
        "torch.__version__, torch.version.cuda)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "0.5.23 0.3.2 2.14.1+cu130 13.0\n"


@pytest.mark.parametrize("version", ["2.8.3", "2.8.2", "2.7.4"])
def test_flash_attn_sdists(built, version):
    members = sdist_members(built.files("pypi") / f"flash_attn-{version}.tar.gz")
    top = f"flash_attn-{version}"
    assert sorted(members) == [
        f"{top}/{path}"
        for path in ("PKG-INFO", "flash_attn/__init__.py", "flash_attn/version.py", "setup.py")
    ]
    pkg_info = metadata(members[f"{top}/PKG-INFO"].decode())
    assert (pkg_info["Name"], pkg_info["Version"]) == ("flash_attn", version)
    assert pkg_info.get_all("Requires-Dist") == ["torch"]
    assert f"__version__ = '{version}'" in members[f"{top}/flash_attn/version.py"].decode()
    setup_py = members[f"{top}/setup.py"].decode()
    assert ("nvcc died" in setup_py) == (version == "2.7.4")
    assert "import torch" in setup_py


def test_flash_attn_build_needs_torch(built, tmp_path):
    with tarfile.open(built.files("pypi") / "flash_attn-2.8.3.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    # -S: no site-packages, so no torch, as in an isolated build environment.
    result = subprocess.run(
        [sys.executable, "-S", "setup.py", "--version"],
        cwd=tmp_path / "flash_attn-2.8.3",
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "the build needs torch and cannot import it" in result.stderr
    assert "--no-build-isolation" in result.stderr


def test_stand_ins_are_reproducible(tmp_path):
    for spec in pyindex.STAND_INS:
        first, second = tmp_path / "1", tmp_path / "2"
        first.mkdir(exist_ok=True), second.mkdir(exist_ok=True)
        build = pyindex.build_sdist if spec.sdist else pyindex.build_wheel
        assert build(spec, first).read_bytes() == build(spec, second).read_bytes(), spec.filename


def test_project_names_are_normalized():
    assert pyindex.normalize("Flash_Attn") == "flash-attn"
    assert pyindex.normalize("zope.interface") == "zope-interface"
    assert pyindex.project_of("flash_attn-2.8.3.tar.gz") == "flash-attn"
    assert pyindex.project_of("torch-2.14.1+cu130-py3-none-any.whl") == "torch"
