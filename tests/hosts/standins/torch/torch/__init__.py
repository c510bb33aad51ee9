"""torch, as a test stand-in: the version and CUDA release a CUDA build of PyTorch reports."""

from torch import version as version
from torch.version import __version__ as __version__
