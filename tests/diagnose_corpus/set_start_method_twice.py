"""set_start_method called a second time, after the default context was already fixed.

Source: https://github.com/SUC-DriverOld/MSST-WebUI/issues/36
Cause: the script calls multiprocessing.set_start_method("spawn") where a start method was already set (the thread's
    traceback: "RuntimeError: context has already been set"); the fix in the thread is force=True, the lasting one
    is a context object (get_context) instead of the global setting.
Changed: the first setting stands for the library import that set it in the thread; no web UI.
Expect: context has already been set && get_context
Timeout: 60
"""

import multiprocessing

multiprocessing.set_start_method("spawn")  # a library the script imports did this


def serve() -> None:
    multiprocessing.set_start_method("spawn")  # webUI.py, line 147
    print("serving")


if __name__ == "__main__":
    serve()
