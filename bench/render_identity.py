"""Are the rendered files byte-identical to an earlier commit's? A refactor of the serving
core must not change one byte a host gets (a changed unit restarts the server).

Renders, with this checkout and with REV (a git worktree of it, made in a temporary folder),
every host of the example inventories and every built-in profile on each architecture of
data/gpus.toml at 1, 2, 4 and 8 GPUs and two SGLang releases (refusals included: the error
text must match too), and prints how many cases match and each one that differs.

    uv run python bench/render_identity.py [--rev 9de83c4]
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ("0.5.17", "0.5.23")
COUNTS = (1, 2, 4, 8)


def _inventory_hosts(path: Path) -> list[str]:
    """The host names of an example inventory: its module-level lists of names or
    (name, data) tuples, read with ast (nothing of it runs)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant):
            if isinstance(node.elts[0].value, str) and len(node.elts) == 2:
                names.append(node.elts[0].value)
        elif isinstance(node, ast.List):
            names += [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return [n for n in dict.fromkeys(names) if isinstance(n, str)]


def cases(root: Path) -> list[list[str]]:
    sys.path.insert(0, str(root))
    from pyinfra_sglang import gpus
    from pyinfra_sglang.serving.profiles import available_profiles

    found = [
        ["--inventory", f"inventories/{inv.name}", "--inventory-host", host]
        for inv in sorted((root / "inventories").glob("*.py"))
        for host in _inventory_hosts(inv)
    ]
    for profile in sorted(available_profiles()):
        for arch in sorted(gpus.known_archs()):
            for count in COUNTS:
                for release in RELEASES:
                    found.append(
                        ["--profile", profile, "--arch", arch, "--gpus", str(count),
                         "--sglang-version", release]
                    )  # fmt: skip
    return found


def render_all(tree: Path, all_cases: list[list[str]]) -> list[str]:
    """Each case's stdout, stderr and exit status, rendered in one interpreter of ``tree``."""
    program = (
        "import contextlib, io, json, sys\n"
        f"sys.path.insert(0, {str(tree)!r})\n"
        # The CLI became a package (cli/main.py); an earlier commit has cli.py.
        "try:\n    from pyinfra_sglang.cli.main import main\n"
        "except ImportError:\n    from pyinfra_sglang.cli import main\n"
        "out = []\n"
        "for case in json.loads(sys.stdin.read()):\n"
        "    o, e = io.StringIO(), io.StringIO()\n"
        "    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):\n"
        "        try:\n"
        "            rc = main(['render', *case])\n"
        "        except SystemExit as exit:\n"
        "            rc = exit.code\n"
        "    text = f'{rc}\\n{o.getvalue()}\\n{e.getvalue()}'\n"
        # Warnings name files by their path (known_hosts): the trees' own paths differ.
        f"    out.append(text.replace({str(tree)!r}, '<tree>'))\n"
        "print(json.dumps(out))\n"
    )
    import json

    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tree,
        input=json.dumps(all_cases),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="9de83c4", help="the commit to compare with")
    args = parser.parse_args()
    all_cases = cases(ROOT)
    with tempfile.TemporaryDirectory() as scratch:
        before_tree = Path(scratch) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(before_tree), args.rev],
            cwd=ROOT,
            check=True,
        )
        # The example inventories read secret files that git ignores: the same ones.
        if (ROOT / "secrets").is_dir():
            shutil.copytree(ROOT / "secrets", before_tree / "secrets")
        # An inventory added since REV has nothing to compare with.
        all_cases = [
            c for c in all_cases if c[0] != "--inventory" or (before_tree / c[1]).is_file()
        ]
        try:
            before = render_all(before_tree, all_cases)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(before_tree)], cwd=ROOT, check=True
            )
    after = render_all(ROOT, all_cases)
    differ = [case for case, b, a in zip(all_cases, before, after) if b != a]
    rendered = sum(1 for text in after if text.startswith("0\n"))
    print(f"{len(all_cases)} cases ({rendered} rendered, {len(all_cases) - rendered} refused)")
    print(f"identical to {args.rev}: {len(all_cases) - len(differ)} of {len(all_cases)}")
    for case in differ:
        print("differs:", " ".join(case))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
