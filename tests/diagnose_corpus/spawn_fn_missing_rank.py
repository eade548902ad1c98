"""mp.spawn's function written without the rank parameter.

Source: https://github.com/pytorch/pytorch/issues/40258
Cause: torch.multiprocessing.spawn calls fn(i, *args): "it looks like just the process number" comes first, so a
    function without a rank parameter gets one argument too many ("TypeError: ... takes 2 positional arguments but
    3 were given").
Changed: a function that adds two numbers instead of BERT encoding; fork instead of spawn (faster here).
Expect: takes 2 positional arguments but 3 were given && rank as its first parameter
Timeout: 60
"""

import torch.multiprocessing as mp


def build_xq(filenames, batch_size):
    return len(filenames) // batch_size


if __name__ == "__main__":
    mp.start_processes(build_xq, args=(["a", "b", "c", "d"], 2), nprocs=2, start_method="fork")
