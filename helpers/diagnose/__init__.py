"""`python -m helpers.diagnose [--timeout S] -- COMMAND ...`: run a learner's own script, and when it
hangs or dies, say why and where the course explains it.

* `tree`: the command in a process group of its own, under a child subreaper; its stderr teed; the
  churn of its pids; killing all of it (the resource tracker last) and removing what it left.
* `stacks`: each process's stacks (py-spy, or faulthandler files armed by `helpers/diagnose_site`)
  and its role.
* `patterns`: the hangs of notebook 06 (and 01, 05) as rules over the evidence; `deaths`: a process that
  died (a signal, an exit code, a worker's traceback).
* `collectives`: torch's Flight Recorder, each rank's records collected at the deadline (or as ranks end),
  and the first collective where the ranks differ.
* `cli`: the command line and the report.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line (imported late: `import helpers.diagnose` stays cheap)."""
    from helpers.diagnose.cli import main as cli_main

    return cli_main(argv)
