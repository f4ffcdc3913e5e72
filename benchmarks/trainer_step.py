"""One training step of the embedded trainer as prod50h runs it, part by part, against its floor.

Configuration: the ``trainer:`` section of ``scenarios/prod50h.yaml`` turned into the
trainer's configuration by ``ftsim.cosim.replay.trainer_config`` exactly as the co-simulation
does (replication 0: one embedding shard per embedding PS, seeds from the replication's
stream): batch 256, dim 8, bottom 13-32-8, top 359-32-1, 26 tables capped at 1000 rows, SGD
lr 0.3, MFU counters on, no update listeners, no training loss (the co-simulation never reads
it: ``train(..., loss=False)``).

The batches are generated beforehand (a pool cycled through, each batch's lookup indices built
on its first step as a co-simulated replication builds them once for all its trainers), so the
time is the step's own. One BLAS thread (``threadpoolctl``), as the co-simulation runs.

Reported:

* ``step``: median over ``--repeats`` of the mean time of ``--steps`` uninstrumented steps,
  wall-clock and the thread's CPU time, with the fastest and slowest repeat;
* a table, one row per part of the step, from as many instrumented repeats interleaved with
  those (each part's method is wrapped by a timer; a part's time excludes the parts it calls;
  ``--clock cpu`` by default; median per part): its time, its floating-point operations
  (FLOP) and the bytes it must move, its floor and time / floor. The floor of a GEMM is its
  FLOP at the rate this BLAS reaches on that very shape, measured alone on warm caches (so a
  batch of 27 x 8 x 27 products is held to what the BLAS does for such small matrices, not
  to its peak); the floor of the rest is its bytes at the rate of an in-cache copy. Parts
  count only the GEMMs the maths needs: the interaction's backward needs ``dz @ W_pairsᵀ``
  (256 x 32 x 351); the implementation computes a symmetric 256 x 32 x 729 product instead
  (twice the flops, no scatter; see ``DotInteraction.backward``), so its time / floor shows
  that choice;
* the step's floor (the parts' floors added up), time / floor, and the FLOP floor at the
  BLAS's peak (a 1024^3 GEMM), for scale;
* the time of the BLAS products the step makes, alone (:func:`products_made`): keeping the
  trained models bit-identical keeps these products, so this is the floor of any faster step
  with the same results, and the rest of the step is what is left to gain.

Usage: ``python benchmarks/trainer_step.py [--steps 200] [--repeats 15] [--warmup 100]
[--clock cpu|wall] [--quick]`` (``--quick``: a smoke run of 2 repeats of 5 steps with short
rate measurements, which the tests run so that the benchmark cannot rot).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from ftsim.cosim.replay import trainer_config
from ftsim.policies import catalog  # noqa: F401 (the kinds a scenario may name)
from ftsim.scenario.loader import load_scenario
from ftsim.trainer import Trainer
from ftsim.trainer.embeddings import SegmentSum
from ftsim.trainer.model import bce_with_logits

PROD = Path(__file__).resolve().parents[1] / "scenarios" / "prod50h.yaml"
POOL = 32  # pre-generated batches, cycled through

# (part, path of the object from the trainer, method); a part's time excludes nested parts
PARTS: list[tuple[str, str, str]] = [
    ("embedding gather", "embeddings", "lookup"),
    ("bottom MLP", "model.bottom", "forward"),
    ("bottom MLP", "model.bottom", "backward"),
    ("interaction fwd", "model.interaction", "forward"),
    ("top MLP", "model.top", "forward"),
    ("top MLP", "model.top", "backward"),
    ("loss gradient", "model", "backward"),  # sigmoid - label, scaled (the rest is nested)
    ("interaction bwd", "model.interaction", "backward"),
    ("dense optimizer", "dense_optimizer", "step"),
    ("sparse update", "embeddings", "apply_gradients"),
    ("MFU counters", "mfu", "add"),
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
    """Train ``n`` steps on the pool as the co-simulation does; (wall, CPU) s per step."""
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(n):
        tr.train_batch(batches[i % POOL], loss=False)
    return (time.perf_counter() - t0) / n, (time.thread_time() - c0) / n


def best_time(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Fastest mean CPU seconds per call of ``fn`` over ``repeats`` runs of ``calls``."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - t0) / calls)
    return best


# ------------------------------------------------------------------------ floors
def gemms(tr: Trainer) -> dict[str, list[tuple[str, tuple, tuple, bool]]]:
    """Per part, the GEMMs the maths needs: (label, A's shape, B's shape, A transposed) with
    a leading batch dimension for batched products; shapes from the trainer's model."""
    m, b = tr.model, tr.cfg.batch_size
    f, d, p = m.interaction.n_vectors, m.interaction.dim, m.interaction.n_pairs
    out = defaultdict(list)
    for part, mlp in (("bottom MLP", m.bottom), ("top MLP", m.top)):
        for layer, (n_in, n_out) in enumerate(zip(mlp.sizes[:-1], mlp.sizes[1:], strict=True)):
            out[part].append((f"fwd {b}x{n_in}x{n_out}", (b, n_in), (n_in, n_out), False))
            out[part].append((f"dW {n_in}x{b}x{n_out}", (b, n_in), (b, n_out), True))
            if layer > 0:
                out[part].append((f"dX {b}x{n_out}x{n_in}", (b, n_out), (n_out, n_in), False))
    n_top = m.top.sizes[1]
    out["interaction fwd"].append((f"{b} x ({f}x{d}x{f})", (b, f, d), (b, d, f), False))
    out["interaction bwd"] += [
        (f"dz Wpᵀ {b}x{n_top}x{p}", (b, n_top), (n_top, p), False),
        (f"dz Wzᵀ {b}x{n_top}x{d}", (b, n_top), (n_top, d), False),
        (f"{b} x ({f}x{f}x{d})", (b, f, f), (b, f, d), False),
    ]
    return out


def products_made(tr: Trainer) -> list[tuple[tuple, tuple, bool]]:
    """The BLAS products the step makes, as (A's shape, B's shape, A transposed): those of
    :func:`gemms` but the interaction's symmetric ``dz @ W_symᵀ`` (b x n x F², see
    ``DotInteraction.backward``) for ``dz @ W_pairsᵀ``, and without a one-column gradient
    times a weight row (no BLAS call: a broadcast multiply). Bit-identical results keep
    exactly these products, so their time alone is the floor of any such step."""
    f, n_top = tr.model.interaction.n_vectors, tr.model.top.sizes[1]
    made = []
    for products in gemms(tr).values():
        for label, a, bshape, trans_a in products:
            if label.startswith("dz Wpᵀ"):
                bshape = (n_top, f * f)
            if not trans_a and a[-1] == 1:
                continue
            made.append((a, bshape, trans_a))
    return made


def gemm_flop(a: tuple, bshape: tuple, trans_a: bool) -> int:
    """Floating-point operations (2 per multiply-add) of ``A @ B`` (or ``Aᵀ @ B``)."""
    batch = a[0] if len(a) == 3 else 1
    rows, inner = (a[-1], a[-2]) if trans_a else (a[-2], a[-1])
    return 2 * batch * rows * inner * bshape[-1]


def gemm_seconds(a: tuple, bshape: tuple, trans_a: bool, dtype, calls: int, repeats: int):
    """Time of one such product alone, warm caches, this BLAS (one thread)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(a).astype(dtype)
    y = rng.standard_normal(bshape).astype(dtype)
    lhs = x.T if trans_a else x
    out = np.empty(np.matmul(lhs, y).shape, dtype)
    return best_time(lambda: np.matmul(lhs, y, out=out), calls, repeats)


def part_bytes(tr: Trainer, n_unique: float) -> dict[str, float]:
    """Bytes each memory-bound part must read and write (besides its GEMMs)."""
    m, e = tr.model, tr.embeddings
    b, t, d = tr.cfg.batch_size, len(e.table_sizes), e.dim
    f, p, item = m.interaction.n_vectors, m.interaction.n_pairs, m.dtype.itemsize
    lookups = b * t
    dense = m.flat_params.size
    return {
        # rows gathered and written, plus the ids
        "embedding gather": lookups * (2 * d * item + 8),
        # Xᵀ copy (read + write), the pairs out of the Gram matrices (read + write)
        "interaction fwd": 2 * b * f * d * item + 2 * b * p * item,
        # the Gram-matrix gradients written and read again by the batched product
        "interaction bwd": 2 * b * f * f * item,
        "loss gradient": 3 * b * item,
        # gradient rows read, per-id sums written, plus the lookups' ranks
        "segment sums": lookups * (d * item + 4) + n_unique * d * item,
        # rows and sums read, rows written
        "sparse update": 3 * n_unique * d * item + n_unique * 8,
        "dense optimizer": 3 * dense * item,
        "MFU counters": n_unique * (8 + 8 + 8),
    }


def copy_rate(calls: int, repeats: int) -> float:
    """Bytes per second (read + write) of a 1 MiB copy within the caches."""
    src = np.ones(1 << 18, np.float32)
    dst = np.empty_like(src)
    return 2 * src.nbytes / best_time(lambda: np.copyto(dst, src), calls, repeats)


# ------------------------------------------------------------------ instrumenting
def instrument(
    tr: Trainer, totals: dict[str, float], clock: Callable[[], float]
) -> Callable[[], None]:
    """Wrap every part's method with a timer adding its exclusive ``clock`` seconds (its
    time less the nested parts') to ``totals[part]``; returns the function that removes them."""
    undo = []
    stack = [0.0]  # per open timer: seconds spent in nested parts

    def wrap(owner, name: str, part: str) -> None:
        fn = getattr(owner, name)

        def timed(*args, **kwargs):
            stack.append(0.0)
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = clock() - t0
                totals[part] += spent - stack.pop()
                stack[-1] += spent

        setattr(owner, name, timed)
        undo.append((owner, name, fn))

    for part, path, method in PARTS:
        owner = tr
        for attr in path.split("."):
            owner = getattr(owner, attr)
        wrap(owner, method, part)
    wrap(SegmentSum, "__call__", "segment sums")  # on the class: calls look it up there

    def remove() -> None:
        for owner, name, fn in reversed(undo):
            if isinstance(owner, type):
                setattr(owner, name, fn)
            else:
                delattr(owner, name)  # the instance attribute shadowed the method

    return remove


def measure(tr: Trainer, batches: list, args) -> tuple[list, dict[str, list[float]]]:
    """Uninstrumented (wall, CPU) per step per repeat, and per part its times per repeat."""
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
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
    return steps, parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="steps per repeat")
    ap.add_argument("--repeats", type=int, default=15, help="repeats (median reported)")
    ap.add_argument("--warmup", type=int, default=100, help="untimed steps first")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="of the breakdown")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 repeats of 5 steps")
    args = ap.parse_args()
    calls, rate_repeats = (100, 9)
    if args.quick:
        args.steps, args.repeats, args.warmup = 5, 2, 2
        calls, rate_repeats = 3, 2
    with threadpool_limits(1):
        print("BLAS:", blas_line())
        tr, batches = make_trainer()
        cfg, m = tr.cfg, tr.model
        print(
            f"prod50h trainer: batch {cfg.batch_size}, dim {cfg.model.embedding_dim}, "
            f"bottom {m.bottom.sizes}, top {m.top.sizes}, "
            f"{len(tr.data.table_sizes)} tables / {tr.embeddings.n_rows} rows, "
            f"{tr.n_shards} shards, sparse {cfg.optimizer.sparse.kind}"
        )
        steps, parts = measure(tr, batches, args)
        emb, pattern = tr.embeddings, tr._lookups(batches[0])[1].pattern
        n_unique = statistics.mean(len(np.unique(b.cat + emb.offsets[:-1])) for b in batches)
        ids = (batches[0].cat + emb.offsets[:-1]).reshape(-1)
        index_s = best_time(lambda: SegmentSum(ids, emb.n_rows, pattern), calls, rate_repeats)
        gemm_time: dict[str, float] = defaultdict(float)
        flop: dict[str, float] = defaultdict(float)
        rows = []
        for part, products in gemms(tr).items():
            for label, a, bshape, trans_a in products:
                s = gemm_seconds(a, bshape, trans_a, m.dtype, calls, rate_repeats)
                n = gemm_flop(a, bshape, trans_a)
                gemm_time[part] += s
                flop[part] += n
                rows.append((part, label, n, s))
        made_s = sum(gemm_seconds(*p, m.dtype, calls, rate_repeats) for p in products_made(tr))
        big = 1024
        peak = gemm_flop((big, big), (big, big), False) / gemm_seconds(
            (big, big), (big, big), False, m.dtype, max(1, calls // 50), rate_repeats
        )
        bandwidth = copy_rate(calls, rate_repeats)
        moved = part_bytes(tr, n_unique)
        loss_s = best_time(
            lambda: bce_with_logits(np.zeros(cfg.batch_size, m.dtype), batches[0].label),
            calls,
            rate_repeats,
        )
    print(
        f"peak GEMM rate {peak / 1e9:.1f} GFLOP/s (1024^3); "
        f"in-cache copy {bandwidth / 1e9:.1f} GB/s"
    )
    print("GEMMs the maths needs, alone on warm caches (their rate is the floor on that shape):")
    for part, label, n, s in rows:
        print(f"  {part:<16} {label:<24} {n / 1e6:6.2f} MFLOP {1e6 * s:7.1f} µs "
              f"{n / s / 1e9:6.1f} GFLOP/s")  # fmt: skip
    for name, values in zip(("wall", "CPU"), zip(*steps, strict=True), strict=True):
        print(
            f"step ({name}): {1e6 * statistics.median(values):7.1f} µs (median of "
            f"{args.repeats} x {args.steps} steps; min {1e6 * min(values):.1f}, "
            f"max {1e6 * max(values):.1f})"
        )
    whole = statistics.median(parts.pop("instrumented step"))
    print(f"parts ({args.clock} time, median per part; instrumented step {1e6 * whole:.1f} µs):")
    print(f"  {'part':<17}{'µs':>8}{'share':>8}{'MFLOP':>8}{'KB':>8}{'floor µs':>10}{'x floor':>9}")
    floor_total = 0.0
    for part, values in parts.items():
        med = statistics.median(values)
        floor = gemm_time.get(part, 0.0) + moved.get(part, 0.0) / bandwidth
        floor_total += floor
        ratio = f"{med / floor:9.1f}" if floor > 0 else f"{'-':>9}"
        print(
            f"  {part:<17}{1e6 * med:8.1f}{100 * med / whole:7.1f}%{flop.get(part, 0) / 1e6:8.2f}"
            f"{moved.get(part, 0) / 1e3:8.0f}{1e6 * floor:10.1f}{ratio}"
        )
    step_cpu = statistics.median(s[1] for s in steps)
    total_flop = sum(flop.values())
    print(
        f"step floor {1e6 * floor_total:.1f} µs: "
        f"step (CPU) / floor = {step_cpu / floor_total:.2f}; "
        f"{total_flop / 1e6:.1f} MFLOP at the peak rate: {1e6 * total_flop / peak:.1f} µs "
        f"(step / that = {step_cpu / (total_flop / peak):.2f})"
    )
    print(
        f"the step's own BLAS products, alone: {1e6 * made_s:.1f} µs (step / that = "
        f"{step_cpu / made_s:.2f}); the rest, {1e6 * (step_cpu - made_s):.1f} µs, is copies, "
        f"elementwise work, the sparse update and Python"
    )
    print(
        f"not in the step: the float64 training loss, {1e6 * loss_s:.1f} µs (train(loss=True)); "
        f"a batch's segment index, {1e6 * index_s:.1f} µs, built once for all its trainers"
    )


if __name__ == "__main__":
    main()
