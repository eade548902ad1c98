# %%NBQA-CELL-SEPbdce4d
import dataclasses
import inspect
import multiprocessing as mp

import torch
import torch.multiprocessing as torch_mp

from helpers import checks, environment, hogwild, plots, timing

cores = environment.usable_cores()

# %%NBQA-CELL-SEPbdce4d
task = hogwild.make_task()
print("train:", tuple(task.x_train.shape), "test:", tuple(task.x_test.shape), "classes:", task.classes)
print("samples per class in train:", torch.bincount(task.y_train).tolist())
print("untrained model below 20 % accuracy:", hogwild.accuracy(hogwild.make_model(), task) < 20)

# %%NBQA-CELL-SEPbdce4d
config = hogwild.Config(steps=2_000, batch_size=32, lr=0.05, threads=1)
with timing.measure_load() as baseline_load:
    baseline = hogwild.hogwild(1, config, task=task)
print("steps taken:", baseline.steps)
print("test accuracy above 85 %:", baseline.accuracy > 85)

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# the accuracy in the last decimals, the timings and the plot vary by machine
print(f"accuracy {baseline.accuracy:.1f} %, {baseline.samples_per_s:,.0f} samples/s, start-up {baseline.startup:.2f} s")
print(baseline_load.result.summary())
fig = plots.curves({"1 process": baseline.curve()}, "Single-process baseline", smooth=50)

# %%NBQA-CELL-SEPbdce4d
print(inspect.getsource(hogwild.train_worker))

# %%NBQA-CELL-SEPbdce4d
ctx = torch_mp.get_context(environment.default_start_method())  # the platform's default start method
model = hogwild.make_model()
model.share_memory()  # every parameter into shared memory, in place
task.share_memory_()  # the data too, so that no child gets a copy
counter, stop, barrier = ctx.Value("l", 0), ctx.Event(), ctx.Barrier(3)
log = torch.full((2, config.steps), float("nan")).share_memory_()
spans = torch.full((2, config.steps, 2), float("nan"), dtype=torch.float64).share_memory_()
workers = [
    ctx.Process(target=hogwild.train_worker, args=(rank, model, task, config, counter, stop, barrier, log, spans))
    for rank in range(2)
]
for w in workers:
    w.start()
barrier.wait(timeout=120)  # returns once both workers are ready: from here on they train
for w in workers:
    w.join(timeout=120)
print("exit codes:", [w.exitcode for w in workers])
print("steps claimed from the shared counter:", counter.value)
print("the parent's model learned:", hogwild.accuracy(model, task) > 85)
del counter, stop, barrier, workers, log, spans

# %%NBQA-CELL-SEPbdce4d
run2 = hogwild.hogwild(2, config, task=task)
print("steps per process add up to the budget:", sum(run2.steps) == config.steps)
print("both processes took steps:", min(run2.steps) > 0)
print("parameters in shared memory:", all(p.is_shared() for p in run2.model.parameters()))
print("accuracy within 2 points of the single process:", abs(run2.accuracy - baseline.accuracy) <= 2)

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# how the steps split between the processes, the accuracy decimals and the curves vary from run to run
print("steps per process:", run2.steps, f"accuracy {run2.accuracy:.1f} % (1 process: {baseline.accuracy:.1f} %)")
per_process = {f"process {r}": run2.losses[r, : run2.steps[r]] for r in range(run2.processes)}
fig = plots.curves(per_process, "Loss of each Hogwild process, by its own step", smooth=50)
fig = plots.curves(
    {"1 process": baseline.curve(), "2 processes (all steps in time order)": run2.curve()},
    "Same budget, same start: 1 vs 2 processes",
    smooth=50,
    xlabel="step of the run (all processes)",
)

# %%NBQA-CELL-SEPbdce4d
scaling_config = hogwild.Config(steps=2_000, threads=1)
speeds = hogwild.speed_table([1, 2, 4], scaling_config, task=task, rounds=3)
runs = speeds.runs
print("every run took the whole budget:", all(sum(r.steps) == scaling_config.steps for rs in runs.values() for r in rs))
print(
    "accuracy within 2 points of 1 process:",
    all(abs(r.accuracy - one.accuracy) <= 2 for rs in runs.values() for r, one in zip(rs, runs[1])),
)

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# timings vary by machine and run
print(f"usable cores: {cores}; {speeds.rounds} interleaved rounds; medians, with the range over the rounds")
for n, rs in runs.items():
    rate = timing.spread(r.samples_per_s for r in rs)
    startup = timing.spread(r.startup for r in rs)
    print(f"{n} process(es) x 1 thread: {rate.median:9,.0f} samples/s, start-up {startup.median:.2f} s,"
          f" accuracy {rs[-1].accuracy:.1f} %")
    if n > 1:
        gain = speeds.speedup(n)
        print(f"    speed-up {gain}")
        print("   ", timing.read_ratio(f"{n} processes over 1", gain.median, limit=min(n, cores), load=speeds.load))
threaded = speeds.threaded_speedup()
rate = timing.spread(r.samples_per_s for r in speeds.threaded)
print(f"1 process x {speeds.threads} threads:  {rate.median:9,.0f} samples/s, speed-up over 1 thread {threaded}")
print("   ", timing.read_ratio(f"{speeds.threads} threads over 1", threaded.median, limit=speeds.threads, load=speeds.load))
hog = max(n for n in runs if n <= cores)  # the most processes that still get a core each
versus = speeds.versus_threaded(hog)
winner = "Hogwild" if versus.median > 1.1 else "one process with threads" if versus.median < 0.9 else "neither"
print(f"Hogwild ({hog} x 1 thread) over 1 process x {speeds.threads} threads: {versus}: {winner} wins here")
print(speeds.load.summary())
fig = plots.scaling(
    list(runs),
    [speeds.speedup(n).median for n in runs],
    cores,
    "Hogwild: samples/s over 1 process (median of rounds)",
    ideal=[min(n, cores) for n in runs],
    xlabel="processes (1 thread each)",
    ylabel="speed-up over 1 process (x)",
)

# %%NBQA-CELL-SEPbdce4d
for method in ("fork", "spawn"):
    if method not in mp.get_all_start_methods():
        print(f"{method}: not available on this platform")
        continue
    unshared = hogwild.hogwild(2, config, task=task, model=hogwild.make_model(), share=False, start_method=method)
    print(
        f"{method:5} without share_memory(): parent's model learned: {unshared.accuracy > 85},",
        f"parameters shared afterwards: {all(p.is_shared() for p in unshared.model.parameters())}",
    )

# %%NBQA-CELL-SEPbdce4d
model = hogwild.make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
with_parent_optimizer = hogwild.hogwild(2, config, task=task, model=model, optimizer=optimizer)
print("model learned:", with_parent_optimizer.accuracy > 85)
print("parent's optimizer after training:", hogwild.momentum_buffers(optimizer))

# %%NBQA-CELL-SEPbdce4d
if "fork" in mp.get_all_start_methods():
    try:
        hogwild.hogwild(2, hogwild.Config(threads=2), task=task, start_method="fork")
    except ValueError as exc:
        print("ValueError:", str(exc).split(";")[0])
else:
    print("fork is not available here: nothing to refuse")

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# timings vary by machine and run
big = hogwild.Config(steps=1_000, batch_size=128, threads=1)
speeds_big = {}
with timing.measure_load() as threads_load:
    for label, threads in (("1 thread each", 1), (f"{torch.get_num_threads()} threads each (default)", None)):
        run = hogwild.hogwild(
            2, dataclasses.replace(big, threads=threads), task=task,
            model=hogwild.make_model(hidden=256), start_method="spawn", time_limit=3,
        )
        speeds_big[f"2 processes x {label}"] = run.samples_per_s
        print(f"2 processes x {label:28}: {run.samples_per_s:9,.0f} samples/s, {sum(run.steps)} steps")
    one = hogwild.in_this_process(
        dataclasses.replace(big, threads=cores), task=task, model=hogwild.make_model(hidden=256), time_limit=3
    )
    speeds_big[f"1 process x {cores} threads"] = one.samples_per_s
    print(f"{f'1 process x {cores} threads (this one)':42}: {one.samples_per_s:9,.0f} samples/s, {sum(one.steps)} steps")
capped, default, single = speeds_big.values()
print(f"capped over default threads: {capped / default:.1f}x (no fixed limit; > 1: capping wins), capping wins here:"
      f" {capped > default}")
print(f"2 processes x 1 thread over 1 process x {cores} threads: {capped / single:.2f}x:",
      "Hogwild" if capped > 1.1 * single else "threads" if capped < 0.9 * single else "neither", "wins here")
print(threads_load.result.summary())
fig = plots.bars(
    list(speeds_big), list(speeds_big.values()), "Threads and processes, larger model",
    unit="samples/s", highlight=[False, torch.get_num_threads() > 1, False], highlight_label="oversubscribed",
)

# %%NBQA-CELL-SEPbdce4d
sparse_task = hogwild.make_sparse_task(features=1_000, active=4)
sparse_runs = {}
for label, batch, sparse in (("sparse, batch 1", 1, True), ("sparse, batch 4", 4, True), ("dense, batch 4", 4, False)):
    cfg = hogwild.Config(steps=3_000, batch_size=batch, lr=0.1, record_rows=True)
    run = hogwild.hogwild(2, cfg, task=sparse_task, model=hogwild.make_sparse_model(sparse=sparse))
    sparse_runs[label] = (run, hogwild.conflicts(run, dense=not sparse))
single_sparse = hogwild.hogwild(
    1, hogwild.Config(steps=3_000, batch_size=4, lr=0.1), task=sparse_task, model=hogwild.make_sparse_model()
)
shares = {label: c["conflicting"] for label, (_, c) in sparse_runs.items()}
dense_counts = sparse_runs["dense, batch 4"][1]
print("dense: every overlapping step conflicts:", dense_counts["conflicting"] == dense_counts["overlapping"])
print(
    "conflicts grow with the rows a step touches:",
    shares["sparse, batch 1"] < shares["sparse, batch 4"] < shares["dense, batch 4"],
)
same_batch = [run for run, _ in sparse_runs.values() if run.batch_size == 4]
print(
    "Hogwild within 2 points of 1 process, sparse and dense:",
    all(abs(run.accuracy - single_sparse.accuracy) <= 2 for run in same_batch),
)

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# the shares depend on how the two processes were scheduled, which varies from run to run
print(f"1 process, batch 4: accuracy {single_sparse.accuracy:.1f} % after {sum(single_sparse.steps) * 4:,} samples")
for label, (run, c) in sparse_runs.items():
    print(f"2 processes, {label:16}: {c['overlapping']:6.1%} of steps overlap, {c['conflicting']:6.1%} conflict,"
          f" accuracy {run.accuracy:.1f} % after {sum(run.steps) * run.batch_size:,} samples")
fig = plots.bars(list(shares), [100 * s for s in shares.values()], "Steps that collided with another process's step",
                 unit="% of steps", highlight=[s > 0.5 for s in shares.values()], highlight_label="most steps collide")
curves = {"1 process, batch 4": single_sparse.curve()}
curves.update({f"2 processes, {label}": run.curve() for label, (run, _) in sparse_runs.items() if run.batch_size == 4})
fig = plots.curves(curves, "Convergence on the sparse problem", smooth=100, xlabel="step of the run (all processes)")

# %%NBQA-CELL-SEPbdce4d
early = hogwild.hogwild(2, hogwild.Config(steps=8_000, target_loss=0.3), task=task)
print("stop signal set:", early.stopped_early)
print("stopped before the budget:", sum(early.steps) < 8_000)
print("both processes took steps:", min(early.steps) > 0)
print("accuracy above 80 %:", early.accuracy > 80)

# %%NBQA-CELL-SEPbdce4d
# NBVAL_IGNORE_OUTPUT
# when the target is reached depends on the interleaving of the processes
print(f"steps per process: {early.steps}, total {sum(early.steps)} of 8,000, accuracy {early.accuracy:.1f} %")

# %%NBQA-CELL-SEPbdce4d
def my_prepare(model):
    pass  # the workers train private copies: the parent's model stays untrained

# %%NBQA-CELL-SEPbdce4d
checks.shared_model(my_prepare)

# %%NBQA-CELL-SEPbdce4d
# Solution: move every parameter (and buffer) to shared memory before the workers start
def solution_prepare(model):
    model.share_memory()


checks.shared_model(solution_prepare)

# %%NBQA-CELL-SEPbdce4d
def my_share_state(optimizer):
    pass  # each worker creates its own buffers at its first step

# %%NBQA-CELL-SEPbdce4d
checks.shared_momentum(my_share_state)

# %%NBQA-CELL-SEPbdce4d
# Solution: create the buffers in the parent, as zeros, and move them to shared memory
def solution_share_state(optimizer):
    for group in optimizer.param_groups:
        for p in group["params"]:
            optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p).share_memory_()


checks.shared_momentum(solution_share_state)

# %%NBQA-CELL-SEPbdce4d
print("removed the inductor cache folder:", hogwild.remove_cache_dir() is not None)
