"""A script that only looks hung: it is busy on the CPU.

Source: https://discuss.pytorch.org/t/distributed-data-parallel-repeated-pickling/104098
Cause: not a hang: "my code works, but is very slow" (the thread found work repeated every iteration); the main
    process is running all the time.
Changed: the repeated work is a pure-Python loop in the main process (no model, no data set).
Expect: not hung
Timeout: 2
"""

total = 0
for step in range(10**10):
    total += step % 7
print(total)
