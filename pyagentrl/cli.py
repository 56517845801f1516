"""The `pyagentrl` command (also `python -m pyagentrl`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="pyagentrl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("demo", help="the ops on a synthetic batch, then GiGPO advantages of real FrozenLake rollouts")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from pyagentrl import demo

        demo.main()


if __name__ == "__main__":
    main()
