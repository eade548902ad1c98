"""Checkers for the exercises: each returns a `Verdict`, which a notebook shows as one line ("Correct: ..."
or "Not yet: ... hint") and which is truthy only when the answer is right, so it can also be asserted.

A verdict is returned, not printed: nbval runs cells without storing history, so IPython cannot see a
trailing `;` there, and a checker that printed *and* returned a value would show two outputs.

A checker must give the same verdict on every machine for the same answer: it tests the answer on fixed
cases or by running it under the watchdog, never by wall-clock time. The one checker that must judge
speed (the capstone's second job) compares the main process's CPU time, which other programs on the
machine do not inflate, and requires a factor far above its noise.

Each chapter's checkers live in their own module here and are re-exported, so a notebook writes
`checks.name(...)`. Add a chapter by writing `helpers/checks/<chapter>.py` and importing it below.
"""

from helpers.checks.capstone import batch_lr, second_job
from helpers.checks.core import Verdict, verdict
from helpers.checks.ddp_practice import no_sync_accumulation, resume_from_snapshot
from helpers.checks.distributed import average_gradients, sampler_epochs
from helpers.checks.hogwild import shared_model, shared_momentum
from helpers.checks.loading import io_workers, shard_bounds, worker_init_fn
from helpers.checks.model_parallel import bytes_per_rank, pipeline_split, tensor_parallel_plan
from helpers.checks.orientation import fork_safe_settings, main_guard_script, threads_per_process
from helpers.checks.pitfalls import fixed_mystery, safe_get
from helpers.checks.pool import chunksize_choice, imap_pipeline
from helpers.checks.scale import layout_choice, predicted_sent
from helpers.checks.sharing import collect, exact_counter, keep_received

__all__ = [
    "Verdict",
    "verdict",
    "threads_per_process",
    "fork_safe_settings",
    "main_guard_script",
    "worker_init_fn",
    "shard_bounds",
    "io_workers",
    "keep_received",
    "collect",
    "exact_counter",
    "shared_model",
    "shared_momentum",
    "imap_pipeline",
    "chunksize_choice",
    "average_gradients",
    "sampler_epochs",
    "fixed_mystery",
    "safe_get",
    "no_sync_accumulation",
    "resume_from_snapshot",
    "batch_lr",
    "second_job",
    "bytes_per_rank",
    "pipeline_split",
    "tensor_parallel_plan",
    "predicted_sent",
    "layout_choice",
]
