"""sglang, as a test stand-in: the name and version only, no server yet."""

from sglang.version import __version__ as __version__
