"""Scripts the notebooks launch with command-line tools (torchrun). They ship inside the package so that
every install has them; run them by path (`helpers.distributed.SCRIPT`)."""

import os
import sys


def exit_without_teardown() -> None:
    """WORKAROUND for torch 2.13, not a template: leave without the interpreter's teardown.

    Every backward pass puts a Python object (a contextvars.Context) into the thread's state, and the
    collectives DDP starts during the backward copy it. gloo's worker threads, which a DDP model leaves
    running after `destroy_process_group()` (see /proc/self/task), sometimes free the last copy after the
    interpreter has begun to exit; releasing the object needs the GIL, Python ends the thread inside a C++
    destructor, and the rank aborts ("terminate called without an active exception", SIGABRT; a core dump:
    ~AsyncBarrierWork -> ~AsyncAllreduceWork -> ~ThreadLocalState -> take_gil -> PyThread_exit_thread; the
    same abort for a group never destroyed: pytorch/pytorch#190489). It happened on busy machines only.
    torchrun then reports a job that did all its work as failed, and the other ranks wait for it. `os._exit`
    skips atexit handlers and buffered logs, so a script calls this only after every result is written and
    closed; the streams are flushed here. A job that does not meet the abort ends normally instead
    (`destroy_process_group()` in a `finally`, then return).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
