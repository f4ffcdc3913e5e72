"""How the accuracy cost of lost embedding updates scales with the embedded trainer.

Every accuracy figure of ftsim comes from a small trainer (26 tables capped at 1,000 rows,
dimension 8, batch 256, 500 steps standing for 50 h). This study measures whether the
log-loss change per unit PLS, and CPR-MFU/SSU's reduction of it at equal saved bytes, move
as the trainer grows: each knob on its own (embedding dimension, rows per table, steps per
run, batch, the data's Zipf exponent, Criteo rows instead of synthetic ones), several
together, and the trainer trained close to convergence (the ``converged`` trainer preset).
The cluster, the failures and the time model are ``scenarios/cpr_pls.yaml``'s (prod50h's),
so replication *i* has the same failures at every scale: the comparison across scales is
paired.

Each configuration is one sweep point of five policies (vanilla CPR at target PLS 0.05, 0.1
and 0.2, CPR-MFU and CPR-SSU at 0.1; every replication trained, its policies sharing one
failure-free model), and the study reports:

* ``slope``: the log-loss change per unit measured PLS of vanilla CPR, the least-squares
  line through the origin over every (replication, level) pair (with no update lost, partial
  recovery restores the failure-free model exactly, so the line passes through 0), nats;
* ``within``: the slope within replications (each replication's CPR levels less their
  mean: a line per replication, one common slope). It ignores the origin, and with it a
  change common to every policy of a replication: training that amplifies any
  perturbation into a shift of its own (adaptive optimizers mid-way) moves ``slope`` but
  not ``within``. Where both agree, the log-loss change is the lost updates' own;
* ``relative``: that slope over what the failure-free model learned beyond a constant
  predictor (the log loss of predicting the eval set's click rate, minus the failure-free
  model's): a scale-free cost, per unit PLS;
* ``learned``: how far training got toward the synthetic teacher's optimum (the mean binary
  entropy of the teacher's click probabilities on the eval set): (constant − failure-free) /
  (constant − optimum); 1 = converged. Not defined for Criteo rows (no teacher);
* ``mfu_red``, ``ssu_red``: 1 − (their log-loss change) / (vanilla CPR's at the same saved
  bytes, interpolated linearly along CPR's three levels; the time model's bytes do not
  depend on the trainer, so the comparison is at equal bytes at every scale);
* 95% bootstrap intervals over whole replications (every policy of replication *i* drawn
  together), the same resamples for every configuration with the same replications, so
  the ``÷ base`` column (the slope over the base configuration's) has a paired interval.

Usage::

    python benchmarks/accuracy_scale.py [--reps 10] [--jobs 2] [--only NAME ...] [--out DIR]
    python benchmarks/accuracy_scale.py --report DIR   # the table from the runs so far
    python benchmarks/accuracy_scale.py --quick        # smoke run (the tests run it)

Each configuration is a sweep folder under ``--out``; an interrupted study continues where
it stopped (finished replications are kept, ``ftsim sweep --resume``). The full study takes
hours on two cores; its results and the command are in ``docs/accuracy_scale.md``.
"""

from __future__ import annotations

import argparse
import math
import resource
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
"""The 1,000 real Criteo Terabyte rows (never committed: CC BY-NC-SA, see its README);
``--criteo`` gives another place."""

BASE = ["trainer.steps=500"]
"""The base trainer: prod50h's (``cpr_pls.yaml`` trains 600 steps; prod50h 500)."""

LEVELS = {"cpr_pls0.05": 0.05, "cpr": 0.1, "cpr_pls0.2": 0.2}
"""Vanilla CPR's policies (label → target PLS); CPR-MFU and CPR-SSU run at 0.1, as ``cpr``."""

POLICIES = [
    "sweep=null",
    "policies.3={kind: cpr, name: cpr_pls0.05, target_pls: 0.05, fallback: false}",
    "policies.4={kind: cpr, name: cpr_pls0.2, target_pls: 0.2, fallback: false}",
]
"""``cpr_pls.yaml``'s three policies (at 0.1) and vanilla CPR at the two other levels, as one
point (the file's own sweep over the target PLS cleared)."""

CONVERGED = ["trainer={preset: converged}"]
"""The ``converged`` trainer preset (``ftsim.trainer.config.TRAINER_PRESETS``)."""

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
    "converged": CONVERGED,
    "converged_steps2000": [*CONVERGED, "trainer.steps=2000"],
    "converged_steps8000": [*CONVERGED, "trainer.steps=8000"],
    "criteo1k": [
        "trainer.data={kind: criteo, path: '{criteo}'}",
        "trainer.eval_samples=200",
        "trainer.batch_size=32",
    ],
}
"""Configuration name → ``--set`` overrides on top of :data:`BASE` (``{criteo}``: the path of
the Criteo rows)."""

QUICK = {"reps": 2, "configs": ["base"], "extra": ["trainer.steps=20"]}


def overrides(name: str, extra: list[str]) -> list[str]:
    """Every ``--set`` of configuration ``name`` (``extra`` last)."""
    return [*POLICIES, *BASE, *(s.replace("{criteo}", str(CRITEO)) for s in CONFIGS[name]), *extra]


def run_config(name: str, out: Path, reps: int, jobs: int, extra: list[str]) -> Path:
    """Run configuration ``name`` into ``out/name``, continuing a sweep found there; its folder."""
    folder = out / name
    if (folder / "runs.csv").exists() and load(folder).rep.nunique() >= reps:
        return folder
    sets = [*overrides(name, extra), f"trainer.replications={reps}"]
    command = [sys.executable, "-m", "ftsim", "sweep", str(SCENARIO), "--reps", str(reps)]
    command += ["--jobs", str(jobs), *[arg for s in sets for arg in ("--set", s)]]
    resume = (folder / "manifest.json").exists()
    command += ["--resume" if resume else "-o", str(folder)]
    start, cpu = time.perf_counter(), _children_cpu_s()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - start, _children_cpu_s() - cpu
    print(f"{name}: {wall:.0f} s, {cpu:.0f} s CPU", file=sys.stderr)
    return folder


def _children_cpu_s() -> float:
    """CPU time (user + system) of the finished child processes so far, seconds."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def references(name: str, reps: int, extra: list[str]) -> pd.DataFrame:
    """Per replication: the constant predictor's eval log loss and (synthetic data) the
    teacher's optimum, from the data each replication trains on."""
    from ftsim.cosim.replay import trainer_config
    from ftsim.policies import catalog  # noqa: F401 (the kinds a scenario may name)
    from ftsim.scenario.loader import load_scenario
    from ftsim.trainer.trainer import make_data

    scenario = load_scenario(SCENARIO, overrides(name, extra))
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
    """The trained rows of a configuration's finished replications (all five policies), with
    vanilla CPR's target level (``level``, NaN for MFU/SSU) and the measured PLS and the
    log-loss change less their means over the replication's CPR levels (``pls_within``,
    ``delta_within``); from the sweep's shards, so an unfinished sweep reports the
    replications it has."""
    done = folder / "runs.csv"
    shards = [done] if done.exists() else sorted((folder / "shards").glob("*[0-9].csv"))
    if not shards:
        return pd.DataFrame(columns=["rep", "policy", "logloss_delta"])
    runs = pd.concat([pd.read_csv(path) for path in shards], ignore_index=True)
    runs = runs.dropna(subset=["logloss_delta"])
    complete = runs.groupby("rep").policy.nunique() == len(LEVELS) + 2
    runs = runs[runs.rep.isin(complete.index[complete])].assign(level=runs.policy.map(LEVELS))
    cpr = runs[runs.level.notna()].groupby("rep")
    within = {
        "pls_within": runs.pls_measured - cpr.pls_measured.mean().reindex(runs.rep).to_numpy(),
        "delta_within": runs.logloss_delta - cpr.logloss_delta.mean().reindex(runs.rep).to_numpy(),
    }
    return runs.assign(**within).reset_index(drop=True)


def statistics(runs: pd.DataFrame, refs: pd.DataFrame, sample: np.ndarray) -> dict[str, float]:
    """The study's figures for one configuration over replications ``sample`` (replication
    numbers, with repeats when bootstrapping)."""
    weight = np.bincount(sample, minlength=int(runs.rep.max()) + 1).astype(float)
    w = weight[runs.rep.to_numpy()]
    cpr = runs.level.notna().to_numpy()
    pls, delta = runs.pls_measured.to_numpy(), runs.logloss_delta.to_numpy()
    slope = np.sum(w[cpr] * pls[cpr] * delta[cpr]) / np.sum(w[cpr] * pls[cpr] ** 2)
    x, y = runs.pls_within.to_numpy()[cpr], runs.delta_within.to_numpy()[cpr]
    within = np.sum(w[cpr] * x * y) / np.sum(w[cpr] * x**2)
    base = runs.drop_duplicates("rep").set_index("rep")
    ref = refs.set_index("rep")
    wr = weight[base.index.to_numpy()]
    baseline = np.sum(wr * base.baseline_logloss.to_numpy()) / wr.sum()
    constant = np.sum(wr * ref.constant_logloss.loc[base.index].to_numpy()) / wr.sum()
    optimum = np.sum(wr * ref.optimum_logloss.loc[base.index].to_numpy()) / wr.sum()
    out = {
        "slope": slope,
        "within": within,
        "relative": slope / (constant - baseline),
        "learned": (constant - baseline) / (constant - optimum),
        "baseline": baseline,
    }
    curve = []
    for level in LEVELS.values():
        at = runs.level.to_numpy() == level
        mean_gb = np.sum(w[at] * runs.saved_gb.to_numpy()[at]) / np.sum(w[at])
        curve.append((mean_gb, np.sum(w[at] * delta[at]) / np.sum(w[at])))
    gb, cpr_delta = zip(*sorted(curve), strict=True)
    for kind, column in (("cpr_mfu", "mfu_red"), ("cpr_ssu", "ssu_red")):
        at = runs.kind.to_numpy() == kind
        mean_gb = np.sum(w[at] * runs.saved_gb.to_numpy()[at]) / np.sum(w[at])
        mean_delta = np.sum(w[at] * delta[at]) / np.sum(w[at])
        inside = gb[0] <= mean_gb <= gb[-1]
        reference = np.interp(mean_gb, gb, cpr_delta)
        out[column] = 1 - mean_delta / reference if inside else math.nan
    return out


def report(out: Path, names: list[str], extra: list[str], draws: int = 2000) -> str:
    """The study's table (markdown) from the replications finished in ``out``. Configurations
    with the same replications share their bootstrap resamples (paired); ``÷ base`` is given
    for those with the base configuration's replications."""
    data, waiting = {}, []
    for name in names:
        runs = load(out / name)
        if runs.empty:
            waiting.append(name)
            continue
        reps = sorted(runs.rep.unique())
        data[name] = (runs, references(name, max(reps) + 1, extra), tuple(reps))
    resamples: dict[tuple, list[np.ndarray]] = {}
    rng = np.random.default_rng(2024)
    for _, _, reps in data.values():
        if reps not in resamples:
            resamples[reps] = [rng.choice(reps, len(reps)) for _ in range(draws)]
    point = {
        name: statistics(runs, refs, np.array(reps)) for name, (runs, refs, reps) in data.items()
    }
    boots = {
        name: [statistics(runs, refs, s) for s in resamples[reps]]
        for name, (runs, refs, reps) in data.items()
    }
    names = list(data)
    reference = names[0]
    lines = [
        f"95% bootstrap intervals ({draws} resamples of whole replications, the same for every"
        f" configuration with the same replications; ÷ {reference} paired)",
        "",
        "| configuration | n | failure-free log loss | learned | slope (nats / PLS) "
        f"| within replications | relative (per PLS) | ÷ {reference} | MFU reduction "
        "| SSU reduction |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        p, b, reps = point[name], boots[name], data[name][2]

        def ci(key, values=b, fmt="{:.3g}", p=p):
            lo, hi = np.nanpercentile([v[key] for v in values], [2.5, 97.5])
            return f"{fmt.format(p[key])} [{fmt.format(lo)}, {fmt.format(hi)}]"

        ratio = "–"
        if reps == data[reference][2]:
            r = [v["slope"] / u["slope"] for v, u in zip(b, boots[reference], strict=True)]
            lo, hi = np.percentile(r, [2.5, 97.5])
            ratio = f"{p['slope'] / point[reference]['slope']:.2f} [{lo:.2f}, {hi:.2f}]"
        learned = "–" if math.isnan(p["learned"]) else f"{p['learned']:.2f}"
        lines.append(
            f"| {name} | {len(reps)} | {p['baseline']:.4f} | {learned} | {ci('slope')} "
            f"| {ci('within')} | {ci('relative')} | {ratio} | {ci('mfu_red', fmt='{:.2f}')} "
            f"| {ci('ssu_red', fmt='{:.2f}')} |"
        )
    if waiting:
        lines += ["", f"No replication finished yet: {', '.join(waiting)}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="trained replications per point")
    parser.add_argument("--jobs", type=int, default=2, help="processes per sweep")
    parser.add_argument("--only", nargs="+", choices=list(CONFIGS), help="these configurations")
    parser.add_argument("--out", type=Path, help="folder of the runs (default: a temporary one)")
    parser.add_argument("--report", type=Path, help="only the table, from this folder's runs")
    parser.add_argument("--quick", action="store_true", help="smoke run: base, 2 reps, 20 steps")
    parser.add_argument("--criteo", type=Path, default=CRITEO, help="the Criteo rows' file")
    args = parser.parse_args()
    globals()["CRITEO"] = args.criteo.resolve()
    names = args.only or [n for n in CONFIGS if n != "criteo1k" or args.criteo.exists()]
    extra: list[str] = []
    if args.quick:
        names, args.reps, extra = QUICK["configs"], QUICK["reps"], QUICK["extra"]
    if args.report:
        names = [n for n in names if (args.report / n / "manifest.json").exists()]
        print(report(args.report, names, extra))
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        for name in names:
            run_config(name, out, args.reps, args.jobs, extra)
        print(report(out, names, extra))


if __name__ == "__main__":
    main()
