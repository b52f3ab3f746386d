"""``python -m token_spec ...``: the same command line as the ``token_spec`` script."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
