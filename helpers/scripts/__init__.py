"""Scripts the notebooks launch with command-line tools (torchrun). They ship inside the package so that
every install has them; run them by path (`helpers.distributed.SCRIPT`)."""

import os
import sys


def exit_without_teardown() -> None:
    """WORKAROUND for torch 2.13, not a template: leave without the interpreter's teardown.

    A DDP model leaves gloo's threads running after `destroy_process_group()` (see /proc/self/task), and
    tearing them down at interpreter exit sometimes aborted a rank on a busy machine ("terminate called
    without an active exception", SIGABRT): torchrun then reports a job that did all its work as failed,
    and the other ranks wait for it. `os._exit` skips atexit handlers and buffered logs, so a script calls
    this only after every result is written and closed; the streams are flushed here. A job that does
    not meet the abort ends normally instead (`destroy_process_group()` in a `finally`, then return).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
