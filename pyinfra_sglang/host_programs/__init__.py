"""Programs shipped to hosts and run there: the standard library only (plus pynvml, torch or
huggingface_hub where a program's docstring says so), no imports from pyinfra-sglang,
Python 3.9+.

They live in the core, beside the code that reads their output, because the offline CLI runs
some of them too (``decode-check`` is decode_client.py). A test parses each one and fails on
any other import.
"""

from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def program_path(name: str) -> Path:
    """The file of the host program ``name`` (e.g. ``gpu_sampler.py``)."""
    path = FOLDER / name
    if name.startswith(("_", ".")) or "/" in name or not path.is_file():
        raise FileNotFoundError(f"no host program {name!r} in {FOLDER}")
    return path
