"""`python -m helpers.diagrams [NAME or CHAPTER ...] [--check]`: redraw the stored diagrams, or list stale ones."""

from __future__ import annotations

import argparse
import sys

from helpers import diagrams


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.diagrams", description=__doc__)
    parser.add_argument("names", nargs="*", help="diagram names or chapter prefixes such as 05 (default: all)")
    parser.add_argument("--check", action="store_true", help="only report diagrams whose stored file is stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = diagrams.stale()
            print("\n".join(f"stale: {name}" for name in stale) or "every stored diagram is up to date")
            return 1 if stale else 0
        for path in diagrams.write(args.names or None):
            print(f"wrote {path.relative_to(diagrams.FIGURES_DIR.parent.parent)}")
    except ValueError as error:
        print(f"python -m helpers.diagrams: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
