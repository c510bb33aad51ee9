"""`python -m pyinfra_sglang.cli`: the `pyinfra-sglang` command without its entry point."""

from pyinfra_sglang.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
