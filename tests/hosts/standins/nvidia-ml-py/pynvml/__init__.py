"""pynvml (nvidia-ml-py), as a test stand-in: the test double tests/doubles/pynvml.py (packaged
here as pynvml/_double.py), replaying the real 2x H200 capture packaged beside it
(pynvml/capture/) instead of reading GPUs. Same function and constant names as the real module;
the double's docstring says what each call returns."""

from pathlib import Path as _Path

from pynvml import _double

# The double finds its capture in the repository's fixtures; here the capture travels inside
# the package. Its functions read CAPTURE when called, so this takes effect for all of them.
_double.CAPTURE = _Path(__file__).resolve().parent / "capture"

from pynvml._double import *  # noqa: E402, F403  (the real module's names)
