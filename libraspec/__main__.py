"""`python -m libraspec SUBCOMMAND ...`: the command line.

Each subcommand is a module with `HELP` (one line), `add_arguments(parser)` and
`run(args) -> int`; registering one is one line in `SUBCOMMANDS`. Bad input (a ValueError
or a missing file) ends with a one-line message and exit status 2, not a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    "bench": "libraspec.experiments.bench",
    "report": "libraspec.experiments.report",
    "sweep": "libraspec.experiments.sweep",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m libraspec", description="LibraSpec Explorer: benchmarks and reports"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sub = commands.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the exact command, for reports that print how to regenerate them
    try:
        return int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError) as err:
        parser.exit(2, f"{parser.prog} {args.command}: error: {err}\n")


if __name__ == "__main__":
    sys.exit(main())
