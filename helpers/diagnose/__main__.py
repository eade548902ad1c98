"""Entry point of `python -m helpers.diagnose`."""

import sys

from helpers.diagnose.cli import main

sys.exit(main())
