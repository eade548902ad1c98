# %%NBQA-CELL-SEPbdce4d
import inspect
import multiprocessing as mp
import queue

import matplotlib.pyplot as plt
import torch
import torch.multiprocessing as torch_mp

from helpers import checks, environment, sharing, timing, watchdog

# %%NBQA-CELL-SEPbdce4d
print(inspect.getsource(sharing.write_first_element))
ctx = torch_mp.get_context(environment.default_start_method())  # the platform's default start method
inbox, outbox = ctx.SimpleQueue(), ctx.Queue()  # SimpleQueue: put() has sent the item when it returns (section 5)
tensor = torch.zeros(4)
child = ctx.Process(target=sharing.write_first_element, args=(inbox, outbox))
child.start()
print("shared before sending:", tensor.is_shared())
inbox.put(tensor)
print("shared after sending: ", tensor.is_shared())
print("child says:", outbox.get(timeout=60))
print("parent sees the child's write:", tensor[0].item() == 42)
try:
    outbox.get(timeout=0.5)
except queue.Empty:
    print("nothing more within 0.5 s: queue.Empty")
inbox.put("release")
child.join(timeout=60)
print("child exit code:", child.exitcode)
del inbox, outbox, child

# %%NBQA-CELL-SEPbdce4d
print("numpy:", sharing.crossing("numpy"))

# %%NBQA-CELL-SEPbdce4d
big = torch.zeros(1_000_000)
print("NumPy array of 4 MB pickles to more than 4 MB:", sharing.pickled_size(big.numpy().copy()) > 4_000_000)
print("tensor of 4 MB pickles to less than 1 KB (a handle):", sharing.pickled_size(big) < 1_000)
del big

# %%NBQA-CELL-SEPbdce4d
shm = environment.shm_bytes()
largest = min(128 * 2**20, shm[1] // 8) if shm else 128 * 2**20
sizes = [s for s in (2**10, 2**14, 2**17, 2**20, 2**23, 2**25, 2**27) if s <= largest]
with timing.measure_load() as handoff_load:
    table = sharing.handoff_table(sizes, repeats=3)
print("sizes measured:", len(table) == len(sizes))
largest_wins = table[-1].tensor_shared < table[-1].pickled_numpy
print("at the largest size, the shared tensor beats the pickled copy:", largest_wins)

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# timings vary by machine and run
fig, ax = plt.subplots(figsize=(6.5, 3.6))
mb = [h.nbytes / 2**20 for h in table]
ax.loglog(mb, [h.pickled_numpy * 1000 for h in table], "o-", label="pickled NumPy (mp.Queue)")
ax.loglog(mb, [h.tensor_not_shared * 1000 for h in table], "s-", label="tensor, shared on put")
ax.loglog(mb, [h.tensor_shared * 1000 for h in table], "^-", label="tensor already shared")
ax.set_xlabel("payload (MB)")
ax.set_ylabel("ms per hand-off")
ax.set_title("Hand-off to another process")
ax.legend()
fig.tight_layout()
for h in table:
    print(f"{h.nbytes / 2**20:10.3f} MB: pickled {h.pickled_numpy * 1000:8.2f} ms, shared on put "
          f"{h.tensor_not_shared * 1000:7.2f} ms, already shared {h.tensor_shared * 1000:6.2f} ms")
small, large = table[0], table[-1]
print(f"smallest ({small.nbytes:,} bytes): pickled / already shared = {small.pickled_numpy / small.tensor_shared:.2f}"
      f" ({'the pickled copy' if small.pickled_numpy < small.tensor_shared else 'the shared tensor'} is faster here)")
print(f"largest ({large.nbytes / 2**20:g} MB): pickled / already shared = {large.pickled_numpy / large.tensor_shared:.0f}"
      " (no fixed limit: the copy grows with the size, the handle does not)")
faster = [h.nbytes for h in table if h.tensor_shared < h.pickled_numpy]
print(f"the already-shared tensor is faster from {faster[0] / 2**20:g} MB up" if faster else "never faster here")
print(handoff_load.result.summary())

# %%NBQA-CELL-SEPbdce4d
print(inspect.getsource(sharing._bump_grads))
for method in [m for m in ("fork", "spawn") if m in mp.get_all_start_methods()]:
    print(method, sharing.grad_after_crossing(method))

# %%NBQA-CELL-SEPbdce4d
print(inspect.getsource(sharing.grow_shared))
print(watchdog.run(sharing.grow_shared, timeout=30, expect="die"))

# %%NBQA-CELL-SEPbdce4d
print("keep every tensor:   ", watchdog.run(sharing.hold_many_tensors, timeout=30))

# %%NBQA-CELL-SEPbdce4d
print(watchdog.run(sharing.dataloader_keeping_batches, timeout=30))

# %%NBQA-CELL-SEPbdce4d
print("keep copies:         ", watchdog.run(sharing.hold_many_tensors, keep="clone", timeout=30))
print("file_system strategy:", watchdog.run(sharing.hold_many_tensors, strategy="file_system", timeout=30))
print("raise the limit:     ", watchdog.run(sharing.hold_many_tensors, headroom=1024, timeout=30))

# %%NBQA-CELL-SEPbdce4d
print(watchdog.run(sharing.strategy_in_spawn_child, timeout=60))

# %%NBQA-CELL-SEPbdce4d
print("normal exit:", sharing.file_system_lifecycle(crash=False))
print("killed:     ", sharing.file_system_lifecycle(crash=True))

# %%NBQA-CELL-SEPbdce4d
print(inspect.getsource(sharing.produce_one))
queue_, done = ctx.Queue(), ctx.Event()
producer = ctx.Process(target=sharing.produce_one, args=(queue_, done))
producer.start()
print("received:", queue_.get(timeout=60).tolist())
print("event set before:", done.is_set())
done.set()  # now the producer may exit
producer.join(timeout=60)
print("producer exit code:", producer.exitcode)
del queue_, done, producer

# %%NBQA-CELL-SEPbdce4d
print("producer exits at once:  ", sharing.early_exit_producer(wait_for_consumer=False))
print("producer waits for Event:", sharing.early_exit_producer(wait_for_consumer=True))

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# throughput varies by machine and run
with timing.measure_load() as reuse_load:
    fresh_rate = sharing.buffer_reuse(reuse=False, count=100, shape=(1024, 1024))
    reused_rate = sharing.buffer_reuse(reuse=True, count=100, shape=(1024, 1024))
print(f"new buffer per item: {fresh_rate:6.0f} items/s")
print(f"reused buffers:      {reused_rate:6.0f} items/s")
print(f"reused / new: {reused_rate / fresh_rate:.2f}x (no fixed limit: what reuse saves is one copy into a new "
      f"segment per item), reuse faster here: {reused_rate > fresh_rate}")
print(reuse_load.result.summary())

# %%NBQA-CELL-SEPbdce4d
print("SimpleQueue: all 20 tensors shared right after put:", sharing.is_shared_after_put("SimpleQueue") == 20)

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# a race: how many the feeder thread has pickled in time varies from run to run
print("Queue: tensors shared right after put:", sharing.is_shared_after_put("Queue"), "of 20")

# %%NBQA-CELL-SEPbdce4d
print(inspect.getsource(sharing.join_before_drain))

# %%NBQA-CELL-SEPbdce4d
print("8 MB NumPy array, join first:", watchdog.run(sharing.join_before_drain, "numpy", timeout=3, expect="hang"))
print("8 MB NumPy array, get first: ", watchdog.run(sharing.join_before_drain, "numpy", drain_first=True, timeout=30))
print("tensor, join first:          ", watchdog.run(sharing.join_before_drain, "tensor", timeout=30))

# %%NBQA-CELL-SEPbdce4d
print(inspect.getsource(sharing.increment))
plain = environment.default_context()
counter, barrier = plain.Value("i", 0), plain.Barrier(4)
workers = [plain.Process(target=sharing.increment, args=(counter, barrier, 50_000, False)) for _ in range(4)]
for w in workers:
    w.start()
for w in workers:
    w.join(timeout=60)
print("exit codes:", [w.exitcode for w in workers])
unlocked = counter.value
print("lost > 0 without the lock:", unlocked < 200_000)
del counter, barrier, workers

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# how many updates are lost varies wildly from run to run
print(f"without the lock: {unlocked:,} of 200,000 ({200_000 - unlocked:,} lost)")

# %%NBQA-CELL-SEPbdce4d
lock = plain.Lock()
with lock:
    print("held; a second acquire times out:", lock.acquire(timeout=0.1) is False)
print("released; acquire works again:", lock.acquire(timeout=0.1))
lock.release()
del lock
print("sharing.count_with_value, with the Value's lock, exact:", sharing.count_with_value(use_lock=True) == 200_000)

# %%NBQA-CELL-SEPbdce4d
print(inspect.getsource(sharing._fill_slot))
print("one slot per process:", sharing.fill_array(workers=2))

# %%NBQA-CELL-SEPbdce4d
print(inspect.getsource(sharing._train_and_log))
log = sharing.shared_loss_log(workers=3, steps=30)
print("every step of every worker logged:", not torch.isnan(log).any().item())
print("final loss per worker:", [round(v, 3) for v in log[:, -1].tolist()])

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# a plot of the logged values above
fig, ax = plt.subplots(figsize=(6, 3.4))
for rank in range(log.shape[0]):
    ax.plot(log[rank].numpy(), label=f"worker {rank}")
ax.plot(log.mean(0).numpy(), color="black", linewidth=2, label="mean of workers")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("loss")
ax.set_title("Loss written by 3 processes into one shared tensor")
ax.legend()
fig.tight_layout()

# %%NBQA-CELL-SEPbdce4d
def my_keep(tensor):
    return tensor  # keeps the shared tensor, and with it an open file descriptor

# %%NBQA-CELL-SEPbdce4d
checks.keep_received(my_keep)

# %%NBQA-CELL-SEPbdce4d
# Solution: keep a private copy; the shared segment and its descriptor are released
def solution_keep(tensor):
    return tensor.clone()


checks.keep_received(solution_keep)

# %%NBQA-CELL-SEPbdce4d
def my_collect(queue, process):
    process.join()
    return queue.get(timeout=10)

# %%NBQA-CELL-SEPbdce4d
checks.collect(my_collect)

# %%NBQA-CELL-SEPbdce4d
# Solution: drain first, then join
def solution_collect(queue, process):
    item = queue.get(timeout=10)
    process.join(timeout=10)
    return item


checks.collect(solution_collect)

# %%NBQA-CELL-SEPbdce4d
def my_increment(counter):
    counter.value += 1

# %%NBQA-CELL-SEPbdce4d
checks.exact_counter(my_increment)

# %%NBQA-CELL-SEPbdce4d
# Solution: the read-add-write happens under the Value's own lock
def solution_increment(counter):
    with counter.get_lock():
        counter.value += 1


checks.exact_counter(solution_increment)

# %%NBQA-CELL-SEPbdce4d
print("removed this kernel's pymp-* folder:", sharing.remove_temp_dir())
