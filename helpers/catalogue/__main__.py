"""`python -m helpers.catalogue [PATH]`: write the website's error index (default site/error_index.md) from
the catalogue; `--cheatsheet` prints the cheat sheet's error rows instead."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from helpers.catalogue import CHEATSHEET, cheatsheet_rows, error_index_markdown

INDEX = Path(__file__).resolve().parents[2] / "site" / "error_index.md"


def main(argv: list[str]) -> int:
    # argparse, so that `--help` or a mistyped option is answered, not written to as a file named after it
    parser = argparse.ArgumentParser(prog="python -m helpers.catalogue", description=__doc__)
    parser.add_argument("path", nargs="?", type=Path, default=INDEX, help="where to write the error index")
    parser.add_argument("--cheatsheet", action="store_true", help="print the cheat sheet's error rows instead")
    args = parser.parse_args(argv)
    if args.cheatsheet:
        print(cheatsheet_rows(CHEATSHEET))
        return 0
    args.path.write_text(error_index_markdown() + "\n")
    print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
