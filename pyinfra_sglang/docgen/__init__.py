"""The reference pages under docs/ generated from code and data (``python -m
pyinfra_sglang.docgen.reference_docs``), and the markers that fence them."""
