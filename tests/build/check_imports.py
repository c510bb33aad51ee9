"""Every module of the core (pyinfra_sglang/) imports on its own, in a fresh interpreter:
what tests/unit/test_import_cycles.py's graph cannot see, since importing ``pkg.module`` runs
``pkg/__init__.py`` first, and a name taken from a module that is only half imported fails
only in some orders.

Run in CI's lint stage (scripts/build_checks.sh), not by ``uv run pytest``: this file's name
does not match ``test_*.py``, so only naming it collects it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.unit.test_import_cycles import CORE, ROOT, core_modules

# Programs shipped to hosts and run there as scripts (test_layers.py): not imported here.
HOST_PROGRAMS = f"{CORE}.host_programs."


def test_every_core_module_imports_on_its_own():
    # In each interpreter, between modules the core is dropped from sys.modules, so each
    # import starts from nothing of ours (third-party modules stay: they cannot change the
    # order). The modules are dealt to one interpreter per core, run side by side.
    names = [name for name in sorted(core_modules()) if not name.startswith(HOST_PROGRAMS)]
    program = (
        "import importlib, sys\n"
        "names = sys.argv[1:]\n"
        "failed = []\n"
        "for name in names:\n"
        "    for loaded in [m for m in sys.modules if m == 'pyinfra_sglang'\n"
        "                   or m.startswith('pyinfra_sglang.')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as error:\n"
        "        failed.append(f'{name}: {type(error).__name__}: {error}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    workers = max(1, min(len(names), os.cpu_count() or 1))
    running = [
        subprocess.Popen(
            [sys.executable, "-c", program, *names[worker::workers]],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for worker in range(workers)
    ]
    outputs = [process.communicate(timeout=300)[0] for process in running]
    assert [process.returncode for process in running] == [0] * workers, "".join(outputs)
