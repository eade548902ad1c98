"""Entry point of `python -m helpers.diagnose`.

Run by an interpreter outside the course's environment (a system `python` found from the repository's
folder), the import of psutil fails: say so in one line, with the interpreter to use, instead of a
traceback.
"""

import sys
from pathlib import Path

try:
    from helpers.diagnose.cli import main
except ModuleNotFoundError as exc:
    venv = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
    use = f"{venv} -m helpers.diagnose -- {venv} your_script.py" if venv.exists() else "the course's environment"
    sys.stderr.write(
        f"diagnose: error: this interpreter ({sys.executable}) cannot import {exc.name}: it is not the course's; "
        f"run {use} (or activate the environment first)\n"
    )
    sys.exit(2)

sys.exit(main())
