"""A Pool worker's KeyError, re-raised by starmap in the main process.

Source: https://github.com/hongluzhou/HID/issues/3
Cause: the task perform_prediction_one_cascade raised "KeyError: 838" (an index missing from idx_2_user) in a pool
    worker; starmap re-raised it in the main process after the worker's RemoteTraceback. The failing line is the
    worker's, not the starmap call.
Changed: a small dict and list of indices instead of the cascades.
Expect: a Pool worker raised KeyError && perform_prediction_one_cascade && !the main process raised
Timeout: 60
"""

from multiprocessing import Pool

idx_2_user = {i: f"user{i}" for i in range(800)}


def perform_prediction_one_cascade(indices):
    return [idx_2_user[i] for i in indices]


if __name__ == "__main__":
    with Pool(2) as pool:
        print(pool.starmap(perform_prediction_one_cascade, [([1, 2],), ([838],)]))
