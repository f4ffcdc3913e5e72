"""The ``ftsim`` command line: ``run``, ``sweep``, ``plot``, ``show``.

Invalid input (a bad scenario, an unknown policy name) prints located one-line errors to
standard error and exits with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command-line input: printed as is, exit status 2."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    args = parser.parse_args(argv)
    from ftsim.scenario.loader import ScenarioError

    try:
        return args.handler(args, argv)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"ftsim: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ftsim", description="Simulate fault-tolerance strategies for recommendation training."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run every policy of a scenario over replications")
    run.add_argument("scenario", type=Path)
    _scenario_options(run)
    run.add_argument("-o", "--output", type=Path, help="run folder (default: under run.output)")
    run.add_argument("--policy", action="append", default=[], help="only this policy (repeatable)")
    run.add_argument("--jobs", type=int, help="parallel worker processes (default: the CPU count)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar or table")
    run.set_defaults(handler=_cmd_run)

    show = commands.add_parser("show", help="print a resolved scenario or the policies")
    show_what = show.add_subparsers(dest="what", required=True)
    config = show_what.add_parser("config", help="the scenario with defaults filled in, in units")
    config.add_argument("scenario", type=Path)
    _scenario_options(config)
    config.set_defaults(handler=_cmd_show_config)
    policies = show_what.add_parser("policies", help="registered policies and their parameters")
    policies.set_defaults(handler=_cmd_show_policies)
    reference = show_what.add_parser(
        "reference", help="the scenario file reference (Markdown), generated from the schema"
    )
    reference.set_defaults(handler=_cmd_show_reference)
    _sweep_parser(commands)
    _plot_parser(commands)
    _validate_parser(commands)
    return parser


def _sweep_parser(commands) -> None:
    sweep = commands.add_parser(
        "sweep", help="run every policy at every point of a grid, resumably, in parallel"
    )
    sweep.add_argument("scenario", type=Path)
    _scenario_options(sweep)
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="sweep a field over values, e.g. --grid 'policies.*.interval=15 min,1 h' "
        "(repeatable; adds to or replaces the scenario's sweep.grid)",
    )
    sweep.add_argument(
        "--policy", action="append", default=[], help="only this policy (repeatable)"
    )
    sweep.add_argument("--reference", help="policy for paired differences (default: first)")
    sweep.add_argument("--jobs", type=int, help="parallel workers (default: the CPU count)")
    sweep.add_argument("--executor", choices=("process", "dask"), default="process")
    sweep.add_argument("--dask-address", help="Dask scheduler, e.g. tcp://host:8786")
    sweep.add_argument("--batch", type=int, default=10, help="replications per task (default 10)")
    sweep.add_argument(
        "--target-halfwidth",
        type=float,
        help="add replications until the 95%% CI half-width of overhead_frac is at most this",
    )
    sweep.add_argument(
        "--max-reps", type=int, default=1000, help="cap for --target-halfwidth (default 1000)"
    )
    sweep.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue this sweep")
    sweep.add_argument("-o", "--output", type=Path, help="run folder (default: under run.output)")
    sweep.add_argument("-q", "--quiet", action="store_true", help="no progress bar or table")
    sweep.set_defaults(handler=_cmd_sweep)


def _plot_parser(commands) -> None:
    plot = commands.add_parser("plot", help="paper figures from a run or sweep folder")
    plot.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    plot.add_argument(
        "--point", type=int, help="sweep point of the breakdown and timeline (default: best)"
    )
    plot.set_defaults(handler=_cmd_plot)


def _validate_parser(commands) -> None:
    validate = commands.add_parser(
        "validate", help="run the validation suite and write a report with figures"
    )
    validate.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("docs") / "validation.md",
        help="report path (default docs/validation.md; figures in docs/validation/)",
    )
    validate.add_argument(
        "--quick", action="store_true", help="fewer replications (statistical checks may fail)"
    )
    validate.set_defaults(handler=_cmd_validate)


def _scenario_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field, e.g. --set policies.0.interval='30 min' (repeatable)",
    )
    parser.add_argument("--seed", type=int, help="same as --set run.seed=N")
    parser.add_argument("--reps", type=int, help="same as --set run.replications=N")
    parser.add_argument(
        "--no-trainer",
        action="store_true",
        help="timing only: do not train the embedded model (same as --set trainer.enabled=false)",
    )


def _load(args):
    from ftsim.scenario.loader import load_scenario

    return load_scenario(args.scenario, _overrides(args))


def _overrides(args) -> list[str]:
    """``--set`` assignments plus those the shorthand options stand for."""
    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"run.seed={args.seed}")
    if args.reps is not None:
        overrides.append(f"run.replications={args.reps}")
    if args.no_trainer:
        overrides.append("trainer.enabled=false")
    return overrides


def _selected_policies(scenario, names: list[str]) -> list[int]:
    labels = scenario.policy_labels
    unknown = [n for n in names if n not in labels]
    if unknown:
        raise UsageError(
            f"--policy: no policy named {', '.join(map(repr, unknown))} in the scenario "
            f"(it has: {', '.join(labels)})"
        )
    return [i for i, label in enumerate(labels) if not names or label in names]


def _cmd_run(args, argv) -> int:
    from ftsim.experiments.output import (
        git_commit,
        versions,
        write_csv,
        write_csv_and_parquet,
        write_json,
    )
    from ftsim.experiments.runner import default_jobs, format_summary, run_scenario, summarize
    from ftsim.scenario.loader import config_hash

    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    scenario = _load(args)
    indices = _selected_policies(scenario, args.policy)
    digest = config_hash(scenario)
    started = datetime.now(UTC)
    out = args.output or (
        Path(scenario.run.output) / scenario.name / f"{started:%Y%m%dT%H%M%SZ}_{digest}"
    )
    total = len(indices) * scenario.run.replications
    bar = _progress(total, args.quiet)
    rows, timeline = run_scenario(
        scenario, indices, progress=bar.update if bar else None, jobs=args.jobs or default_jobs()
    )
    if bar:
        bar.close()
    summary = summarize(rows)
    write_csv_and_parquet(out / "runs", rows)
    write_csv(out / "timeline.csv", timeline)
    write_csv(out / "summary.csv", summary)
    _write_resolved(out / "scenario.yaml", scenario)
    write_json(
        out / "manifest.json",
        {
            "command": "run",
            "scenario": scenario.name,
            "scenario_file": str(args.scenario),
            "config_hash": digest,
            "seed": scenario.run.seed,
            "replications": scenario.run.replications,
            "policies": [scenario.policy_labels[i] for i in indices],
            "argv": ["ftsim", *argv],
            "git_commit": git_commit(),
            "versions": versions(),
            "started_utc": started.isoformat(),
            "finished_utc": datetime.now(UTC).isoformat(),
        },
    )
    if not args.quiet:
        print(format_summary(summary))
        print(f"results: {out}")
    return 0


def _cmd_sweep(args, argv) -> int:
    from ftsim.experiments import sweep
    from ftsim.experiments.store import RunStore, StoreError

    for name in ("jobs", "batch", "max_reps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.resume and args.output and args.resume != args.output:
        raise UsageError("--resume RUN_DIR writes to RUN_DIR; leave out -o")
    plan = sweep.plan_sweep(
        args.scenario,
        _overrides(args),
        args.grid,
        lambda scenario: _selected_policies(scenario, args.policy),
        args.reference,
        args.target_halfwidth,
        args.max_reps,
    )
    started = datetime.now(UTC)
    total = sum(p.scenario.run.replications for p in plan.points) * len(plan.policies)
    try:
        if args.resume:
            store = RunStore.resume(args.resume, plan.config_hash)
        else:
            out = args.output or (
                Path(plan.base.run.output)
                / plan.base.name
                / f"{started:%Y%m%dT%H%M%SZ}_{plan.config_hash}_sweep"
            )
            store = RunStore.create(
                out, sweep.manifest(plan, ["ftsim", *argv], started.isoformat())
            )
        _write_resolved(store.root / "scenario.yaml", plan.base)
        bar = _progress(total, args.quiet)
        computed, reused = sweep.run_sweep(
            plan,
            store,
            executor=args.executor,
            jobs=args.jobs,
            dask_address=args.dask_address,
            batch=args.batch,
            progress=bar.update if bar else None,
        )
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    if bar:
        bar.close()
    summary = sweep.finish(plan, store)
    session = {
        "argv": ["ftsim", *argv],
        "started_utc": started.isoformat(),
        "finished_utc": datetime.now(UTC).isoformat(),
        "computed_reps": computed,
        "reused_reps": reused,
    }
    store.update_manifest(
        finished_utc=session["finished_utc"], sessions=[*store.manifest()["sessions"], session]
    )
    if not args.quiet:
        from ftsim.experiments.stats import format_table

        print(format_table(summary, plan.columns))
    print(f"computed {computed}, reused {reused} (replications)")
    print(f"results: {store.root}")
    return 0


def _cmd_plot(args, argv) -> int:
    from ftsim.plots import plot_run

    if not (args.run_dir / "runs.csv").exists():
        raise UsageError(f"{args.run_dir}: no runs.csv (not a run or sweep folder)")
    for name, outcome in plot_run(args.run_dir, point=args.point):
        print(f"{name}: {outcome}")
    return 0


def _progress(total: int, quiet: bool):
    """A tqdm bar on a terminal, nothing otherwise."""
    if quiet or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="rep", leave=False)


def _write_resolved(path: Path, scenario) -> None:
    import yaml

    from ftsim.experiments.output import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))


def _cmd_show_config(args, argv) -> int:
    import yaml

    scenario = _load(args)
    print(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def _cmd_show_policies(args, argv) -> int:
    from ftsim.policies.registry import policy_classes

    for kind, cls in policy_classes().items():
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        print(f"{kind}: {doc[0] if doc else ''}")
        for name, field in cls.Params.model_fields.items():
            if name == "kind":
                continue
            default = "required" if field.is_required() else f"default {field.default!r}"
            print(f"    {name}: {field.description or ''} ({default})")
    return 0


def _cmd_show_reference(args, argv) -> int:
    from ftsim.scenario.reference import scenario_reference

    sys.stdout.write(scenario_reference())
    return 0


def _cmd_validate(args, argv) -> int:
    from ftsim.validation.suite import all_passed, results_table, validate

    def progress(section) -> None:
        for check in section.checks:
            verdict = "PASS" if check.passed else "FAIL"
            print(f"{verdict}  {check.name}: {check.measured}", flush=True)

    sections = validate(args.output, quick=args.quick, progress=progress)
    print(results_table(sections))
    print(f"report: {args.output}")
    return 0 if all_passed(sections) else 1
