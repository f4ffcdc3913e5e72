"""Training throughput of the NumPy DLRM trainer vs an equivalent PyTorch model.

Configurations (``--model``):

* ``prod50h`` (default): the model prod50h's co-simulation trains (``trainer_config`` of
  ``scenarios/prod50h.yaml``, replication 0: dim 8, bottom 13-32-8, top 359-32-1, 26 tables
  capped at 1000 rows, plain SGD lr 0.3 on dense and sparse parameters, batch 256), one
  thread, as the co-simulation runs it;
* ``kaggle``: facebookresearch/dlrm Kaggle architecture (dim 16, bottom 13-512-256-64-16,
  top 367-512-256-1), the 26 Kaggle tables capped at 100k rows, plain SGD lr 0.1, batches
  128 and 1024 (use ``--threads 2`` for the figures of docs/trainer.md).

The PyTorch model follows ``dlrm_s_pytorch.py``: one
``nn.EmbeddingBag(mode="sum", sparse=True)`` per table, ``torch.bmm`` dot interaction,
``torch.optim.SGD``. Both consume the same pre-generated synthetic batches, so data
generation is excluded (a separate ``numpy+data`` row times ``Trainer.train``, which
generates every batch on the fly).

Every measurement runs in its own child process whose environment has OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE removed (some machines set them and pin OpenBLAS to slower kernels); the
child reports steady-state samples/s (after warm-up) and its peak RSS.

Each cell is the best of ``--repeats`` interleaved measurements, each the fastest ~0.3-s
window of its timed period: on a shared or virtualized machine (CPU steal, other jobs) the
fastest window is the least disturbed one.

Usage: ``python benchmarks/trainer_vs_torch.py [--model prod50h|kaggle] [--threads N]
[--seconds 3] [--repeats 3] [--batch-sizes ...] [--quick]`` (``--quick``: one short cell, a
smoke run that the tests make). The NumPy trainer computes its training loss here (as
``Trainer.train`` does by default), like the PyTorch step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROW_CAP = 100_000  # kaggle
LR = 0.1  # kaggle
POOL = 16  # distinct pre-generated batches cycled through
BATCHES = {"prod50h": [256], "kaggle": [128, 1024]}


def _config(model: str, batch: int):
    """The trainer configuration of ``model`` at batch size ``batch``."""
    if model == "prod50h":
        from ftsim.cosim.replay import trainer_config
        from ftsim.policies import catalog  # noqa: F401 (the kinds a scenario may name)
        from ftsim.scenario.loader import load_scenario

        scenario = load_scenario(Path(__file__).resolve().parents[1] / "scenarios/prod50h.yaml")
        return trainer_config(scenario, 0).model_copy(update={"batch_size": batch})
    from ftsim.trainer import (
        DenseOptimizerConfig,
        OptimizerConfig,
        SparseOptimizerConfig,
        SyntheticDataConfig,
        TrainerConfig,
    )

    return TrainerConfig(
        batch_size=batch,
        eval_samples=1024,
        data=SyntheticDataConfig(row_cap=ROW_CAP),
        optimizer=OptimizerConfig(
            dense=DenseOptimizerConfig(kind="sgd", lr=LR),
            sparse=SparseOptimizerConfig(kind="sgd", lr=LR),
        ),
    )


def _timed(step, warmup: int, seconds: float, window: float = 0.3) -> float:
    """Run ``step(i)`` for ``warmup`` calls, then for ~``seconds`` in windows of ~``window`` s;
    returns steps/s of the fastest window (least disturbed by other processes)."""
    for i in range(warmup):
        step(i)
    best, n, end = 0.0, 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < window:
            step(n)
            n += 1
            k += 1
        best = max(best, k / (time.perf_counter() - t0))
    return best


def _blas_info() -> str:
    from threadpoolctl import threadpool_info

    return "; ".join(
        f"{i['internal_api']} {i.get('version')} {i.get('architecture')} x{i['num_threads']}"
        for i in threadpool_info()
        if i["user_api"] == "blas"
    )


def child_numpy(model: str, batch: int, seconds: float, with_data: bool, threads: int) -> dict:
    """Throughput of ftsim.trainer in this process."""
    from threadpoolctl import threadpool_limits

    from ftsim.trainer import Trainer

    with threadpool_limits(threads):
        trainer = Trainer(_config(model, batch))
        if with_data:
            rate = _timed(lambda i: trainer.train(1), 5, seconds)
        else:
            pool = [trainer.data.batch(i) for i in range(POOL)]
            rate = _timed(lambda i: trainer.train_batch(pool[i % POOL]), 5, seconds)
        blas = _blas_info()
    return {"samples_per_s": rate * batch, "blas": blas}


def child_torch(model: str, batch: int, seconds: float, threads: int) -> dict:
    """Throughput of the equivalent PyTorch DLRM in this process."""
    import numpy as np
    import torch
    from torch import nn

    from ftsim.trainer.data import SyntheticData

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = _config(model, batch)
    data = SyntheticData(cfg.data, batch)
    sizes, d = data.table_sizes, cfg.model.embedding_dim

    def mlp(widths: list[int], relu_last: bool) -> nn.Sequential:
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            layers.append(nn.Linear(a, b))
            if relu_last or i < len(widths) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    class TorchDLRM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.ModuleList(nn.EmbeddingBag(n, d, mode="sum", sparse=True) for n in sizes)
            for e, n in zip(self.emb, sizes, strict=True):
                nn.init.uniform_(e.weight, -((1 / n) ** 0.5), (1 / n) ** 0.5)
            self.bot = mlp([data.n_dense, *cfg.model.bottom_mlp], relu_last=True)
            n_int = d + (len(sizes) + 1) * len(sizes) // 2
            self.top = mlp([n_int, *cfg.model.top_mlp], relu_last=False)
            self.li, self.lj = torch.tril_indices(len(sizes) + 1, len(sizes) + 1, -1)

        def forward(self, dense, cats, offsets):
            x = self.bot(dense)
            ly = [e(c, offsets) for e, c in zip(self.emb, cats, strict=True)]
            t = torch.cat([x, *ly], dim=1).view(len(dense), -1, d)
            z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
            return self.top(torch.cat([x, z], dim=1)).squeeze(1)

    net = TorchDLRM()
    lr = cfg.optimizer.dense.lr
    if cfg.optimizer.sparse.lr != lr:
        raise ValueError("one SGD learning rate for dense and sparse parameters expected")
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    offsets = torch.arange(batch)
    pool = []
    for i in range(POOL):
        b = data.batch(i)
        cats = [torch.from_numpy(np.ascontiguousarray(b.cat[:, t])) for t in range(len(sizes))]
        pool.append((torch.from_numpy(b.dense), cats, torch.from_numpy(b.label)))
    loss_fn = nn.BCEWithLogitsLoss()

    def step(i: int) -> None:
        dense, cats, label = pool[i % POOL]
        opt.zero_grad(set_to_none=True)
        loss_fn(net(dense, cats, offsets), label).backward()
        opt.step()

    rate = _timed(step, 5, seconds)
    build = torch.__config__.show()
    blas = next((w for w in build.replace(",", " ").split() if w.startswith("BLAS_INFO=")), "?")
    cpu = next((ln.strip() for ln in build.splitlines() if "CPU capability" in ln), "")
    return {"samples_per_s": rate * batch, "blas": f"torch {torch.__version__} {blas} {cpu}"}


def run_child(kind: str, model: str, batch: int, seconds: float, threads: int) -> dict | None:
    """Run one measurement in a fresh process with the clean BLAS environment."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    }
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    cmd = [sys.executable, __file__, "--child", kind, "--model", model, "--batch", str(batch)]
    cmd += ["--seconds", str(seconds), "--threads", str(threads)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"[{kind} {model} batch {batch}] failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(BATCHES), default="prod50h")
    ap.add_argument("--batch-sizes", type=int, nargs="+", help="default: 256 (prod50h), 128 1024")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed window per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="measurements per cell; best is shown")
    ap.add_argument("--threads", type=int, default=1, help="BLAS / torch threads")
    ap.add_argument("--quick", action="store_true", help="smoke run: one 0.2 s cell at batch 64")
    ap.add_argument("--child", choices=["numpy", "numpy+data", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.batch_sizes = args.batch_sizes or BATCHES[args.model]
    if args.quick:
        args.batch_sizes, args.seconds, args.repeats = [64], 0.2, 1

    if args.child:
        if args.child == "torch":
            res = child_torch(args.model, args.batch, args.seconds, args.threads)
        else:
            with_data = args.child == "numpy+data"
            res = child_numpy(args.model, args.batch, args.seconds, with_data, args.threads)
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return

    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
        print("torch not importable: PyTorch column skipped")

    if args.model == "kaggle":
        print(f"DLRM Kaggle architecture, tables capped at {ROW_CAP} rows, SGD lr {LR}, ", end="")
    else:
        print("prod50h's co-simulated DLRM (dim 8, 13-32-8, 359-32-1, 26 x 1000 rows), ", end="")
    print(f"{args.threads} thread(s)")
    cols = ["batch", "numpy s/s", "torch s/s", "ratio", "np+data s/s", "np MB", "torch MB"]
    print("  ".join(f"{c:>11}" for c in cols))
    blas = {}
    kinds = ["numpy", "numpy+data"] + (["torch"] if have_torch else [])
    for batch in args.batch_sizes:
        runs: dict[str, list[dict]] = {k: [] for k in kinds}
        for _ in range(args.repeats):  # interleaved, so a noisy period hits all kinds alike
            for k in kinds:
                res = run_child(k, args.model, batch, args.seconds, args.threads)
                if res:
                    runs[k].append(res)
                    blas[k.split("+")[0]] = res["blas"]
        best = {k: max(v, key=lambda r: r["samples_per_s"]) if v else None for k, v in runs.items()}
        rate = {k: r["samples_per_s"] if r else None for k, r in best.items()}
        mem = {k: r["peak_rss_mb"] if r else None for k, r in best.items()}
        if args.quick and not rate["numpy"]:
            raise SystemExit("the NumPy trainer failed (see above)")
        ratio = rate["numpy"] / rate["torch"] if rate["numpy"] and rate.get("torch") else None
        row = [batch, rate["numpy"], rate.get("torch"), ratio, rate["numpy+data"]]
        row += [mem["numpy"], mem.get("torch")]
        fmt = ["d", ".0f", ".0f", ".2f", ".0f", ".0f", ".0f"]
        cells = [("-" if v is None else format(v, f)) for v, f in zip(row, fmt, strict=True)]
        print("  ".join(f"{c:>11}" for c in cells))
    for k, v in blas.items():
        print(f"{k} BLAS: {v}")
    print(f"load average at end: {os.getloadavg()[0]:.2f} (other processes disturb 2-thread runs)")


if __name__ == "__main__":
    main()
