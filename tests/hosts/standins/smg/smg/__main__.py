"""``python -m smg``: the same main() as the console script, as the real smg/__main__.py."""

from smg.cli import main

if __name__ == "__main__":
    main()
