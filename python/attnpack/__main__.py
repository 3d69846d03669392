"""`python -m attnpack ...` runs the `attnpack` command line (attnpack/cli.py)."""
from attnpack.cli import main

if __name__ == "__main__":
    main(prog_name="attnpack")
