"""How the accuracy cost of lost embedding updates scales with the embedded trainer.

Every accuracy figure of ftsim comes from a small trainer (26 tables capped at 1,000 rows,
dimension 8, batch 256, 500 steps standing for 50 h). This study measures whether the
log-loss change per unit PLS, and CPR-MFU/SSU's reduction of it at equal saved bytes, move
as the trainer grows: each knob on its own (embedding dimension, rows per table, steps per
run, batch, the data's Zipf exponent, Criteo rows instead of synthetic ones) and several
together. The cluster, the failures and the time model are ``scenarios/cpr_pls.yaml``'s
(prod50h's), so replication *i* has the same failures at every scale: the comparison across
scales is paired.

For every configuration it runs ``python -m ftsim run scenarios/cpr_pls.yaml`` at three
target PLS levels for vanilla CPR (0.05, 0.1, 0.2) and at 0.1 for CPR-MFU and CPR-SSU, every
replication trained, and reports:

* ``slope``: the log-loss change per unit measured PLS of vanilla CPR, the least-squares
  line through the origin over every (replication, level) pair (with no update lost, partial
  recovery restores the failure-free model exactly, so the line passes through 0), nats;
* ``relative``: that slope over what the failure-free model learned beyond a constant
  predictor (the log loss of predicting the eval set's click rate, minus the failure-free
  model's): a scale-free cost, per unit PLS;
* ``learned``: how far training got toward the synthetic teacher's optimum (the mean binary
  entropy of the teacher's click probabilities on the eval set): (constant − failure-free) /
  (constant − optimum); 1 = converged. Not defined for Criteo rows (no teacher);
* ``mfu_red``, ``ssu_red``: 1 − (their log-loss change) / (vanilla CPR's at the same saved
  bytes, interpolated linearly along CPR's three levels; the time model's bytes do not
  depend on the trainer, so the comparison is at equal bytes at every scale);
* 95% bootstrap intervals over whole replications (all levels of replication *i* drawn
  together), the same resamples for every configuration, so the ``÷ base`` column (the
  slope over the base configuration's) has a paired interval too.

Usage::

    python benchmarks/accuracy_scale.py [--reps 10] [--jobs 2] [--only NAME ...] [--out DIR]
    python benchmarks/accuracy_scale.py --report DIR   # the tables from finished runs
    python benchmarks/accuracy_scale.py --quick        # smoke run (the tests run it)

Runs already in ``--out`` are reused, so an interrupted study continues where it stopped.
The full study (every configuration, 10 replications) takes hours on two cores; its results
and the command are in ``docs/accuracy_scale.md``.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "cpr_pls.yaml"
CRITEO = ROOT.parent / "shared" / "data" / "criteo_tb_head1k.tsv"

BASE = ["trainer.steps=500"]
"""The base trainer: prod50h's (``cpr_pls.yaml`` trains 600 steps; prod50h 500)."""

CONFIGS: dict[str, list[str]] = {
    "base": [],
    "dim16": ["trainer.model.embedding_dim=16", "trainer.model.bottom_mlp=[32,16]"],
    "dim64": ["trainer.model.embedding_dim=64", "trainer.model.bottom_mlp=[32,64]"],
    "rows10k": ["trainer.data.row_cap=10000"],
    "rows100k": ["trainer.data.row_cap=100000"],
    "steps2000": ["trainer.steps=2000"],
    "steps8000": ["trainer.steps=8000"],
    "batch1024": ["trainer.batch_size=1024"],
    "batch2048": ["trainer.batch_size=2048"],
    "zipf0.8": ["trainer.data.zipf_exponent=0.8"],
    "zipf1.3": ["trainer.data.zipf_exponent=1.3"],
    "together": [
        "trainer.model.embedding_dim=32",
        "trainer.model.bottom_mlp=[32,32]",
        "trainer.data.row_cap=10000",
        "trainer.steps=2000",
        "trainer.batch_size=1024",
    ],
    "criteo1k": [
        f"trainer.data={{kind: criteo, path: '{CRITEO}'}}",
        "trainer.eval_samples=200",
        "trainer.batch_size=32",
    ],
}
"""Configuration name → ``--set`` overrides on top of :data:`BASE`."""

LEVELS = (0.05, 0.1, 0.2)
"""Vanilla CPR's target PLS levels; CPR-MFU and CPR-SSU run at the middle one."""

QUICK = {"reps": 2, "configs": ["base"], "extra": ["trainer.steps=20"]}


def run_config(name: str, out: Path, reps: int, jobs: int, extra: list[str]) -> Path:
    """Run (or reuse) configuration ``name``'s three levels; its folder."""
    folder = out / name
    for level in LEVELS:
        target = folder / f"pls{level}"
        if (target / "runs.csv").exists():
            continue
        policies = ["cpr", "cpr_mfu", "cpr_ssu"] if level == LEVELS[1] else ["cpr"]
        sets = [*BASE, *CONFIGS[name], *extra, f"policies.*.target_pls={level}"]
        sets += [f"trainer.replications={reps}"]
        command = [sys.executable, "-m", "ftsim", "run", str(SCENARIO), "-q", "--force"]
        command += ["-o", str(target), "--reps", str(reps), "--jobs", str(jobs)]
        command += [arg for p in policies for arg in ("--policy", p)]
        command += [arg for s in sets for arg in ("--set", s)]
        start = time.perf_counter()
        subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        print(f"{name} PLS {level}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return folder


def references(name: str, reps: int, extra: list[str]) -> pd.DataFrame:
    """Per replication: the constant predictor's eval log loss and (synthetic data) the
    teacher's optimum, from the data each replication trains on."""
    from ftsim.cosim.replay import trainer_config
    from ftsim.scenario.loader import load_scenario
    from ftsim.trainer.trainer import make_data

    scenario = load_scenario(SCENARIO, [*BASE, *CONFIGS[name], *extra])
    rows = []
    for rep in range(reps):
        cfg = trainer_config(scenario, rep)
        batch = make_data(cfg).eval_set(cfg.eval_samples)
        rate = float(np.mean(batch.label))
        prob = batch.prob
        rows.append(
            {
                "rep": rep,
                "constant_logloss": _entropy(np.array([rate]))[0],
                "optimum_logloss": float(np.mean(_entropy(prob))) if prob is not None else math.nan,
            }
        )
    return pd.DataFrame(rows)


def _entropy(p: np.ndarray) -> np.ndarray:
    """Binary entropy in nats (the expected log loss of predicting ``p`` for labels ~ p)."""
    p = np.clip(np.asarray(p, dtype=float), 1e-15, 1 - 1e-15)
    return -(p * np.log(p) + (1 - p) * np.log1p(-p))


def load(folder: Path) -> pd.DataFrame:
    """Every trained row of a configuration's three levels, with its level."""
    frames = []
    for level in LEVELS:
        runs = pd.read_csv(folder / f"pls{level}" / "runs.csv")
        frames.append(runs.assign(level=level))
    runs = pd.concat(frames, ignore_index=True)
    return runs.dropna(subset=["logloss_delta"])


def statistics(runs: pd.DataFrame, refs: pd.DataFrame, sample: np.ndarray) -> dict[str, float]:
    """The study's figures for one configuration over replications ``sample`` (indices,
    with repeats when bootstrapping)."""
    weight = np.bincount(sample, minlength=int(runs.rep.max()) + 1).astype(float)
    w = weight[runs.rep.to_numpy()]
    cpr = runs.kind.to_numpy() == "cpr"
    pls, delta = runs.pls_measured.to_numpy(), runs.logloss_delta.to_numpy()
    slope = np.sum(w[cpr] * pls[cpr] * delta[cpr]) / np.sum(w[cpr] * pls[cpr] ** 2)
    base = runs.drop_duplicates("rep").set_index("rep")
    ref = refs.set_index("rep")
    wr = weight[base.index.to_numpy()]
    baseline = np.sum(wr * base.baseline_logloss.to_numpy()) / wr.sum()
    constant = np.sum(wr * ref.constant_logloss.loc[base.index].to_numpy()) / wr.sum()
    optimum = np.sum(wr * ref.optimum_logloss.loc[base.index].to_numpy()) / wr.sum()
    out = {
        "slope": slope,
        "relative": slope / (constant - baseline),
        "learned": (constant - baseline) / (constant - optimum),
        "baseline": baseline,
    }
    curve = []
    for level in LEVELS:
        at = cpr & (runs.level.to_numpy() == level)
        curve.append(
            (
                np.sum(w[at] * runs.saved_gb.to_numpy()[at]) / np.sum(w[at]),
                np.sum(w[at] * delta[at]) / np.sum(w[at]),
            )
        )
    gb, cpr_delta = zip(*sorted(curve), strict=True)
    for kind, column in (("cpr_mfu", "mfu_red"), ("cpr_ssu", "ssu_red")):
        at = runs.kind.to_numpy() == kind
        mean_gb = np.sum(w[at] * runs.saved_gb.to_numpy()[at]) / np.sum(w[at])
        mean_delta = np.sum(w[at] * delta[at]) / np.sum(w[at])
        inside = gb[0] <= mean_gb <= gb[-1]
        reference = np.interp(mean_gb, gb, cpr_delta)
        out[column] = 1 - mean_delta / reference if inside else math.nan
    return out


def report(out: Path, names: list[str], reps: int, extra: list[str], draws: int = 2000) -> str:
    """The study's table (markdown) from the finished runs in ``out``."""
    data = {name: (load(out / name), references(name, reps, extra)) for name in names}
    n = min(int(runs.rep.nunique()) for runs, _ in data.values())
    rng = np.random.default_rng(2024)
    samples = [rng.integers(0, n, n) for _ in range(draws)]
    every = np.arange(n)
    point = {name: statistics(*data[name], every) for name in names}
    boots = {name: [statistics(*data[name], s) for s in samples] for name in names}
    reference = names[0]
    lines = [
        f"n = {n} trained replications per level; 95% bootstrap intervals ({draws} resamples"
        " of whole replications, the same for every configuration)",
        "",
        "| configuration | failure-free log loss | learned | slope (nats / PLS) "
        "| relative (per PLS) | ÷ base | MFU reduction | SSU reduction |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        p, b = point[name], boots[name]

        def ci(key, values=b, fmt="{:.3g}", p=p):
            lo, hi = np.nanpercentile([v[key] for v in values], [2.5, 97.5])
            return f"{fmt.format(p[key])} [{fmt.format(lo)}, {fmt.format(hi)}]"

        ratio = [v["slope"] / r["slope"] for v, r in zip(b, boots[reference], strict=True)]
        lo, hi = np.percentile(ratio, [2.5, 97.5])
        learned = "–" if math.isnan(p["learned"]) else f"{p['learned']:.2f}"
        lines.append(
            f"| {name} | {p['baseline']:.4f} | {learned} | {ci('slope')} | {ci('relative')} "
            f"| {p['slope'] / point[reference]['slope']:.2f} [{lo:.2f}, {hi:.2f}] "
            f"| {ci('mfu_red', fmt='{:.2f}')} | {ci('ssu_red', fmt='{:.2f}')} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="trained replications per level")
    parser.add_argument("--jobs", type=int, default=2, help="processes per run")
    parser.add_argument("--only", nargs="+", choices=list(CONFIGS), help="these configurations")
    parser.add_argument("--out", type=Path, help="folder of the runs (default: a temporary one)")
    parser.add_argument("--report", type=Path, help="only the tables, from this folder's runs")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 configs, 20 steps")
    args = parser.parse_args()
    names = args.only or [n for n in CONFIGS if n != "criteo1k" or CRITEO.exists()]
    extra: list[str] = []
    if args.quick:
        names, args.reps, extra = QUICK["configs"], QUICK["reps"], QUICK["extra"]
    if args.report:
        names = [n for n in names if (args.report / n / f"pls{LEVELS[-1]}").exists()]
        print(report(args.report, names, args.reps, extra))
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        for name in names:
            run_config(name, out, args.reps, args.jobs, extra)
        print(report(out, names, args.reps, extra))


if __name__ == "__main__":
    main()
