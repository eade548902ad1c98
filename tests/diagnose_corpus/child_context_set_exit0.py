"""A spawn child re-runs the script's top-level set_start_method and dies; the parent prints zeros and exits 0.

Source: https://github.com/DeepLabCut/DeepLabCut/issues/1362
Cause: `mp.set_start_method('spawn')` at the top level of the script, outside the main guard: each spawn child
    imports the script again, where the context is already set, and dies of "RuntimeError: context has already
    been set" (the thread's traceback, from the child's `_fixup_main_from_path`); the parent does not check its
    children and goes on with a result they never wrote.
Changed: the children fill a shared array instead of analysing videos; two children.
Expect: exited with code 0, but && context has already been set
Timeout: 60
"""

import multiprocessing as mp

mp.set_start_method("spawn")


def work(out, i: int) -> None:
    out[i] = i + 1.0


if __name__ == "__main__":
    out = mp.Array("d", 2)
    children = [mp.Process(target=work, args=(out, i)) for i in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join()
    print("results:", list(out))
