"""Time of one training step of the embedded trainer as prod50h runs it, part by part.

Configuration: the ``trainer:`` section of ``scenarios/prod50h.yaml`` turned into the
trainer's configuration by ``ftsim.cosim.replay.trainer_config`` exactly as the co-simulation does
(replication 0: one embedding shard per embedding PS, seeds from the replication's stream):
batch 256, dim 8, bottom 13-32-8, top 359-32-1, 26 tables capped at 1000 rows, SGD lr 0.3,
MFU counters on, no update listeners.

The batches are generated beforehand (a pool cycled through), so the time is the step's own:
lookup, forward, loss, backward, dense optimizer, segment sum, sparse update, hooks. One BLAS
thread (``threadpoolctl.threadpool_limits(1)``): the co-simulation runs several trainers on a
shared machine, and small GEMMs on several threads mostly wait for each other.

Reported, in µs per step:

* ``step``: median over ``--repeats`` of the mean step time of ``--steps`` uninstrumented
  steps (after ``--warmup`` steps), with the fastest and slowest repeat, in wall-clock time
  and in the thread's CPU time. On a quiet machine they agree; on a shared one the wall
  time also counts the time the process waited for a core (a spread between repeats), the
  CPU time much less so;
* the breakdown, from as many instrumented repeats interleaved with those (each part's
  method is wrapped by a timer, ``--clock cpu`` by default; median per part): ``lookup``,
  ``bottom MLP`` and ``top MLP`` (forward + backward each), ``interaction fwd``/``bwd``,
  ``dense optimizer``, ``segment sum``, ``sparse update`` (row-wise rule on the touched
  rows) and ``other`` (the rest of the instrumented step: loss, sigmoid, id offsets, MFU
  counters, Python glue, a few µs of timers).

Usage: ``python benchmarks/trainer_step.py [--steps 200] [--repeats 15] [--warmup 100]
[--clock cpu|wall] [--quick]`` (``--quick``: a smoke run of 2 repeats of 5 steps, which the
tests run so that the benchmark cannot rot).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from threadpoolctl import threadpool_info, threadpool_limits

from ftsim.cosim.replay import trainer_config
from ftsim.scenario.loader import load_scenario
from ftsim.trainer import Trainer
from ftsim.trainer.embeddings import SegmentSum

PROD = Path(__file__).resolve().parents[1] / "scenarios" / "prod50h.yaml"
POOL = 32  # pre-generated batches, cycled through

# (part, path of the object from the trainer, method); the methods do not nest
PARTS: list[tuple[str, str, str]] = [
    ("lookup", "embeddings", "lookup"),
    ("bottom MLP", "model.bottom", "forward"),
    ("bottom MLP", "model.bottom", "backward"),
    ("interaction fwd", "model.interaction", "forward"),
    ("interaction bwd", "model.interaction", "backward"),
    ("top MLP", "model.top", "forward"),
    ("top MLP", "model.top", "backward"),
    ("dense optimizer", "dense_optimizer", "step"),
    ("sparse update", "embeddings", "apply_gradients"),
]


def blas_line() -> str:
    """The BLAS libraries NumPy and SciPy load, with kernel and threads (threadpoolctl)."""
    libs = [i for i in threadpool_info() if i["user_api"] == "blas"]
    return "; ".join(
        f"{i['internal_api']} {i['version']} kernel {i.get('architecture')} "
        f"threads {i['num_threads']} ({Path(i['filepath']).name})"
        for i in libs
    )


def make_trainer() -> tuple[Trainer, list]:
    """prod50h's trainer (replication 0) and a pool of its first batches."""
    tr = Trainer(trainer_config(load_scenario(PROD), 0))
    return tr, [tr.data.batch(i) for i in range(POOL)]


def run(tr: Trainer, batches: list, n: int) -> tuple[float, float]:
    """Train ``n`` steps on the pool; (wall, thread CPU) seconds per step."""
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(n):
        tr.train_batch(batches[i % POOL])
    return (time.perf_counter() - t0) / n, (time.thread_time() - c0) / n


def instrument(
    tr: Trainer, totals: dict[str, float], clock: Callable[[], float]
) -> Callable[[], None]:
    """Wrap every part's method with a timer adding ``clock`` seconds to ``totals[part]``;
    returns the function that removes the wrappers again."""
    undo = []

    def wrap(owner, name: str, part: str) -> None:
        fn = getattr(owner, name)

        def timed(*args, **kwargs):
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[part] += clock() - t0

        setattr(owner, name, timed)
        undo.append((owner, name, fn))

    for part, path, method in PARTS:
        owner = tr
        for attr in path.split("."):
            owner = getattr(owner, attr)
        wrap(owner, method, part)
    wrap(SegmentSum, "__call__", "segment sum")  # on the class: calls look it up there

    def remove() -> None:
        for owner, name, fn in undo:
            if isinstance(owner, type):
                setattr(owner, name, fn)
            else:
                delattr(owner, name)  # the instance attribute shadowed the method

    return remove


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="steps per repeat")
    ap.add_argument("--repeats", type=int, default=15, help="repeats (median reported)")
    ap.add_argument("--warmup", type=int, default=100, help="untimed steps first")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="of the breakdown")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 repeats of 5 steps")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.repeats, args.warmup = 5, 2, 2
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    with threadpool_limits(1):
        print("BLAS:", blas_line())
        tr, batches = make_trainer()
        cfg = tr.cfg
        print(
            f"prod50h trainer: batch {cfg.batch_size}, dim {cfg.model.embedding_dim}, "
            f"bottom {[tr.data.n_dense, *cfg.model.bottom_mlp]}, "
            f"top {[tr.model.interaction.out_dim, *cfg.model.top_mlp]}, "
            f"{len(tr.data.table_sizes)} tables / {tr.embeddings.n_rows} rows, "
            f"{tr.n_shards} shards, sparse {cfg.optimizer.sparse.kind}"
        )
        run(tr, batches, args.warmup)
        steps = []
        parts: dict[str, list[float]] = defaultdict(list)
        for _ in range(args.repeats):  # interleaved: both kinds see the same machine load
            steps.append(run(tr, batches, args.steps))
            totals: dict[str, float] = defaultdict(float)
            remove = instrument(tr, totals, clock)
            total = run(tr, batches, args.steps)[args.clock == "cpu"]
            remove()
            for part, seconds in totals.items():
                parts[part].append(seconds / args.steps)
            parts["other"].append(total - sum(totals.values()) / args.steps)
            parts["instrumented step"].append(total)
    for name, values in zip(("wall", "CPU"), zip(*steps, strict=True), strict=True):
        print(
            f"step ({name}): {1e6 * statistics.median(values):7.1f} µs (median of "
            f"{args.repeats} x {args.steps} steps; min {1e6 * min(values):.1f}, "
            f"max {1e6 * max(values):.1f})"
        )
    print(f"breakdown ({args.clock} time, median per part):")
    whole = statistics.median(parts.pop("instrumented step"))
    for part, values in parts.items():
        med = statistics.median(values)
        print(f"  {part:<16} {1e6 * med:7.1f} µs  {100 * med / whole:5.1f} %")
    print(f"  {'(instrumented)':<16} {1e6 * whole:7.1f} µs")


if __name__ == "__main__":
    main()
