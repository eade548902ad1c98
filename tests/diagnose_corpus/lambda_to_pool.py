"""A lambda passed to Pool.map.

Source: https://taourl.com/read-2383105.html
Cause: pickle cannot serialise a lambda or a function defined inside another function; multiprocessing pickles each
    task, so Pool.map raises PicklingError. Define the function at module level.
Changed: nothing.
Expect: cannot be pickled && module level && 04_pool_vs_process, section 3
Timeout: 30
"""

from multiprocessing import Pool


def main():
    with Pool(processes=2) as pool:
        result = pool.map(lambda x: x * x, [1, 2, 3, 4])
        print(result)


if __name__ == "__main__":
    main()
