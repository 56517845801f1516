"""The `pyagentrl` command (also `python -m pyagentrl`). Each command parses its own options."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="pyagentrl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "demo", add_help=False, help="the ops on a synthetic batch, then GiGPO advantages of real FrozenLake rollouts"
    )
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from pyagentrl import demo

        demo.main(rest)


if __name__ == "__main__":
    main()
