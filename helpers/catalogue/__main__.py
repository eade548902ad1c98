"""`python -m helpers.catalogue [PATH]`: write the website's error index (default site/error_index.md) from
the catalogue; `--cheatsheet` prints the cheat sheet's error rows instead."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers.catalogue import CHEATSHEET, cheatsheet_rows, error_index_markdown

INDEX = Path(__file__).resolve().parents[2] / "site" / "error_index.md"


def main(argv: list[str]) -> int:
    if "--cheatsheet" in argv:
        print(cheatsheet_rows(CHEATSHEET))
        return 0
    path = Path(argv[0]) if argv else INDEX
    path.write_text(error_index_markdown() + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
