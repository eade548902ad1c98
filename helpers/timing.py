"""How busy the machine was while we timed something, and how to read a measured ratio against its limit.

A speed-up measured on a laptop with a browser and a video call open is not the speed-up of an idle
machine. Every timing cell and every bench figure therefore measures, beside its own times, how much CPU
*other* processes used just before and during the run, and prints a reading of its ratio that names
that load when it explains the result. Nothing here imports torch: spawned children stay cheap.

    with timing.measure_load() as load:
        ratio = run_experiment()
    print(timing.read_ratio("2 processes", ratio, limit=2, load=load.result))
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import psutil

from helpers.environment import pinnable_cores, pinned, usable_cores
from helpers.validate import positive_int

__all__ = [
    "Figure",
    "Load",
    "measure_load",
    "other_cpu",
    "cores_given",
    "core_speeds",
    "read_ratio",
    "Spread",
    "spread",
    "DISTURBED_CORES",
    "tree_cpu",
]

# Other processes using this many cores' worth of CPU (or more) during a run make it "disturbed": on a
# 2-core machine that is a sixth of the machine, enough to move a speed-up by tenths.
DISTURBED_CORES = 0.3


def _busy_core_seconds() -> float:
    """CPU time the whole machine spent not idle, in core-seconds (steal counts: the hypervisor gave our
    cores to someone else)."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    guest = getattr(t, "guest", 0.0) + getattr(t, "guest_nice", 0.0)  # already inside user/nice on Linux
    return sum(t) - idle - guest


def tree_cpu(pid: int | None = None) -> float:
    """CPU seconds of a process (this one by default) and every live descendant, including the children
    they have reaped; 0.0 for a process that has ended. The notebook audit counts a kernel's cells with it,
    and the load probe subtracts our own tree from the machine's."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # ended between listing and reading: its time arrives with its reaper
            continue
        total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
    return total


def _snapshot() -> tuple[float, float, float]:
    return time.monotonic(), _busy_core_seconds(), tree_cpu()


def _others_between(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """Cores' worth of CPU used by processes outside our tree between two snapshots."""
    wall = b[0] - a[0]
    if wall <= 0:
        return 0.0
    return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / wall)


def other_cpu(seconds: float = 0.25) -> float:
    """Cores' worth of CPU that other processes use right now, sampled over `seconds`."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds > 0:
        raise ValueError(f"seconds must be a positive number, got {seconds!r}")
    a = _snapshot()
    time.sleep(seconds)
    return _others_between(a, _snapshot())


def _spin(count: int) -> float:
    """Seconds a pure-Python loop of `count` additions took (the probe of `cores_given`)."""
    started = time.perf_counter()
    total = 0
    for i in range(count):
        total += i
    return time.perf_counter() - started


def cores_given(count: int = 1_000_000, trials: int = 9) -> float:
    """Cores' worth of work the machine gives us right now: one pure-Python loop alone, then one on every
    usable core at once, taking turns `trials` times: cores x the median time alone / the median of the
    slowest at once. `other_cpu` sees the programs of this machine; this sees also what it cannot: a
    virtual machine whose cores the host shares with other machines shows no load inside, yet its cores
    run slower together than one alone."""
    import multiprocessing as mp

    count = int(count)
    cores = usable_cores()
    if cores < 2:
        return float(cores)
    method = "fork" if "fork" in mp.get_all_start_methods() else None
    with mp.get_context(method).Pool(cores) as pool:
        pool.map(_spin, [1000] * cores)  # every worker started before the clock
        alone, together = [], []
        for _ in range(trials):
            alone.append(pool.apply(_spin, (count,)))
            together.append(max(pool.map(_spin, [count] * cores, chunksize=1)))
    return _cores_from(alone, together, cores)


def _cores_from(alone: list[float], together: list[float], cores: int) -> float:
    """The reading of `cores_given`'s probe: all `cores` when the loops run together as fast as one alone,
    half of them when together they take twice as long. Medians, so one disturbed trial does not decide.
    Not bounded by `cores`: a trial alone slowed by other programs more than those together reads above."""
    return cores * statistics.median(alone) / statistics.median(together)


def core_speeds(count: int = 300_000, trials: int = 3) -> list[float] | None:
    """Each usable core's speed against the fastest (1.0), from a pure-Python loop pinned to one core after
    another, taking turns `trials` times (the median per core); None where a process cannot be pinned
    (macOS, Windows). `cores_given` says how much the machine gives in all; this says where it is missing:
    on a virtual machine the host can slow one of our cores and not the other (here one core ran the same
    loop in 16.5 ms and the other in 10.3 ms for seconds at a time, then the other way round), and a
    process that lands on the slow core makes any ratio against it read high, one on the fast core low."""
    count, trials = positive_int("count", count), positive_int("trials", trials)
    cores = pinnable_cores()
    if cores is None:
        return None
    times: dict[int, list[float]] = {core: [] for core in cores}
    for _ in range(trials):
        for core in times:
            with pinned(core):
                times[core].append(_spin(count))
    return _speeds_from(times)


def probe_fastest_core(into: list[list[float]]) -> int | None:
    """Probe the cores' speeds (`core_speeds`), keep them in `into`, and return the core that was fastest,
    for a baseline that must not run at the speed of whichever core it lands on; None (nothing kept)
    where a process cannot be pinned."""
    speeds = core_speeds()
    cores = pinnable_cores()
    if speeds is None or cores is None:
        return None
    into.append(speeds)
    return cores[speeds.index(max(speeds))]


def median_round_limit(probed: list[float], otherwise: float) -> float:
    """A figure's limit from a limit probed before each round and after the last: each round's is the higher
    of the two probes around it, the figure's the median round's; `otherwise` when nothing was probed.

    The higher, not the mean: a probe takes a tenth of a second, and a core the host slows for a moment may be
    caught by one probe while the round between them mostly escaped it. With the mean, one idle --check run
    read pipeline_speedup 1.47 of a "possible" 1.30 (probes 0.56-0.59 at three of six) and dataloader_cpu 1.78
    of 1.71. A core slow at both ends of a round, the spell that put figures under their floors, still
    lowers that round's limit."""
    rounds = [max(before, after) for before, after in itertools.pairwise(probed)]
    return statistics.median(rounds) if rounds else otherwise


def _speeds_from(times: dict[int, list[float]]) -> list[float]:
    """The reading of `core_speeds`' probe: the fastest core's median time over each core's, in core order."""
    medians = [statistics.median(times[core]) for core in sorted(times)]
    return [min(medians) / median for median in medians]


@dataclass(frozen=True)
class Load:
    """What other processes did to the machine around one timed run."""

    before: float  # cores' worth of CPU used by others in a short probe just before the run
    during: float  # ... during the run
    cores: int  # usable cores of this process
    seconds: float  # length of the run

    @property
    def peak(self) -> float:
        """The larger probe: the one that decides whether the run was disturbed."""
        return max(self.before, self.during)

    @property
    def disturbed(self) -> bool:
        return self.peak >= DISTURBED_CORES

    def others(self) -> str:
        """Both probes in one phrase, because either can make a run disturbed: 'other programs used 1.0 of
        2 cores during the run (0.0 just before)'. Every reading that names the load says it this way."""
        return (
            f"other programs used {self.during:.1f} of {self.cores} cores during the run"
            f" ({self.before:.1f} just before)"
        )

    def summary(self) -> str:
        """One line, e.g. 'machine load: other programs used 1.0 of 2 cores during the run (0.0 just before):
        disturbed, ...'."""
        verdict = "disturbed, the times are slower than this machine can do" if self.disturbed else "undisturbed"
        return f"machine load: {self.others()}: {verdict}"

    def as_dict(self) -> dict[str, float | int | bool]:
        return {
            "other_cores_before": round(self.before, 2),
            "other_cores_during": round(self.during, 2),
            "usable_cores": self.cores,
            "seconds": round(self.seconds, 2),
            "disturbed": self.disturbed,
        }

    @classmethod
    def from_dict(cls, stored: dict[str, Any]) -> Load:
        """The `Load` back from `as_dict`'s record (the bench keeps its figures' loads as dicts, in JSON)."""
        return cls(
            before=stored["other_cores_before"],
            during=stored["other_cores_during"],
            cores=stored["usable_cores"],
            seconds=stored["seconds"],
        )


class measure_load:  # noqa: N801 - used as a context manager, like contextlib's lower-case helpers
    """Context manager that measures the other processes' CPU use before and during its block.

    The probe before the block sleeps `probe` seconds; after the block `.result` holds the `Load`.
    """

    def __init__(self, probe: float = 0.2) -> None:
        if not isinstance(probe, (int, float)) or isinstance(probe, bool) or probe < 0:
            raise ValueError(f"probe must be a number of seconds >= 0, got {probe!r}")
        self.probe = float(probe)
        self.result: Load | None = None
        self._before = 0.0
        self._start: tuple[float, float, float] | None = None

    def __enter__(self) -> measure_load:
        if self.probe > 0:
            self._before = other_cpu(self.probe)
        self._start = _snapshot()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._start is not None
        end = _snapshot()
        self.result = Load(
            before=self._before,
            during=_others_between(self._start, end),
            cores=usable_cores(),
            seconds=end[0] - self._start[0],
        )


def read_ratio(label: str, ratio: float, limit: float | None, load: Load | None = None, *, unit: str = "x") -> str:
    """The learner's reading of one measured ratio against its physical limit, in one or two sentences.

    E.g. '2 processes: 1.1x of a possible 2x. Far below the limit: other programs used 1.0 of 2 cores
    during the run; re-run when the machine is idle.'
    """
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not math.isfinite(ratio) or ratio < 0:
        raise ValueError(f"ratio must be a finite number >= 0, got {ratio!r}")
    if limit is not None and (not isinstance(limit, (int, float)) or isinstance(limit, bool) or not limit > 0):
        raise ValueError(f"limit must be a positive number or None, got {limit!r}")
    head = f"{label}: {ratio:.2f}{unit}" + ("" if limit is None else f" of a possible {limit:.3g}{unit}")
    busy = load is not None and load.disturbed
    why_busy = f"{load.others()}; re-run when the machine is idle" if busy else ""
    if limit is not None and ratio > 1.05 * limit:
        reading = (
            "Above the physical limit: the baseline was slowed by something the parallel run escaped,"
            " or noise (see the text)"
        )
    elif limit is not None and ratio >= 0.75 * limit:
        reading = "Close to the limit"
    elif ratio > 1.1 and limit is None:
        reading = "A real gain" + (f" ({why_busy})" if busy else "")
    elif ratio > 1.1:
        cause = why_busy or "start-up, communication or a part that runs in one process cost the rest"
        reading = f"A real gain, but below the limit: {cause}"
    elif ratio >= 0.9:
        reading = "No gain: the two are within noise of each other" + (f" ({why_busy})" if busy else "")
    else:
        reading = "Slower than the baseline" + (f" ({why_busy})" if busy else "")
    return f"{head}. {reading}."


@dataclass(frozen=True)
class Spread:
    """The median of repeated measurements and their range."""

    median: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return f"{self.median:.3g} (range {self.low:.3g}-{self.high:.3g} over {self.n} runs)"

    @property
    def relative_range(self) -> float:
        """(high - low) / median: 0.1 means the runs agree within 10 %."""
        return (self.high - self.low) / self.median if self.median else math.inf


def spread(values: Iterable[float]) -> Spread:
    """Median and range of repeated runs: one run on a shared machine is noise, several are a measurement."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("values must hold at least one measurement")
    return Spread(statistics.median(vals), min(vals), max(vals), len(vals))


@dataclass
class Figure:
    """One measured ratio. `floor` is the minimum a chapter promises on an idle machine, if any.

    `ratio` is None when the figure could not be measured; `reason` then says why. `load` is the
    machine's load around the measurement (`helpers.timing.Load.as_dict()`), filled in by `measure()`.
    """

    ratio: float | None
    limit: float | None
    what: str
    floor: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, bool] = field(default_factory=dict)  # what must hold besides the ratio
    reason: str | None = None
    load: dict[str, Any] = field(default_factory=dict)
    timed: bool = True  # False for a ratio of counts (bytes, collectives): the machine's load cannot change it

    @property
    def measured(self) -> bool:
        return self.ratio is not None

    @property
    def disturbed(self) -> bool:
        """Whether other programs' load disturbed it: only a timed figure can be (a count of bytes cannot)."""
        return self.timed and bool(self.load.get("disturbed"))

    @property
    def meets_floor(self) -> bool | None:
        if self.ratio is None or (self.floor is None and not self.conditions):
            return None
        return (self.floor is None or self.ratio >= self.floor) and all(self.conditions.values())

    def reading(self) -> str:
        """The figure read against its limit (helpers.timing.read_ratio), or why it is missing.

        Without a limit the ratio is not a speed-up with a ceiling (spawn's start-up over fork's, a restart's
        cost, the hand-written ring's time over gloo's): read_ratio would call any value above 1.1 "a real
        gain", so such a figure is read against its floor, if it has one, and otherwise left to `what`.
        """
        if self.ratio is None:
            return f"not measured: {self.reason}"
        if self.limit is not None:
            text = read_ratio("ratio", self.ratio, self.limit)
        elif self.floor is None:
            text = f"ratio: {self.ratio:.3g}x (no physical limit, no floor: what it measures says how to read it)."
        else:
            side = "at or above" if self.ratio >= self.floor else "below"
            text = f"ratio: {self.ratio:.3g}x (no physical limit), {side} its floor of {self.floor:g}x."
        if self.disturbed:
            text += f" Disturbed: {Load.from_dict(self.load).others()}."
        return text
