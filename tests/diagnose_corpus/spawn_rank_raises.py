"""One rank of torch.multiprocessing.spawn fails an assertion.

Source: https://github.com/LSH9832/edgeyolo/issues/20
Cause: "Process 1 terminated with the following error: ... AssertionError": the error is rank 1's own (the
    maintainer: run it on one card first); spawn ends the other rank and re-raises in the main process.
Changed: the failing assertion is a check of the rank's share of the data; fork instead of spawn (faster here).
Expect: rank 1 raised AssertionError && !main process exited
Timeout: 60
"""

import torch.multiprocessing as mp


def main_worker(rank: int, items: int) -> None:
    share = items - items // 2 if rank == 0 else items // 2
    assert share >= (items + 1) // 2, f"rank {rank}: {share} of {items} items, less than half"


if __name__ == "__main__":
    mp.start_processes(main_worker, args=(9,), nprocs=2, start_method="fork")
