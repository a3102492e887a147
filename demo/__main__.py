"""Command line: ``python -m demo [--rate N] [--fleet-size N] [--port N] ... | --clean``."""

from common import cli
from demo.run import main

if __name__ == "__main__":
    cli.run(main, "demo")
