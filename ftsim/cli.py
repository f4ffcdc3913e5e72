"""The ``ftsim`` command line: ``run``, ``sweep``, ``advise``, ``plot``, ``trace``, ``validate``,
``show``.

Exit status: 0 on success; 1 when ``validate`` has a failed check, or when ``advise`` finds
no setting of any policy within the limits; 2 on invalid input (a
bad scenario, an unknown policy name, an unusable folder), printed as located one-line
errors on standard error, never a traceback: scenario problems as ``FILE: dotted.path:
what is wrong``, others as ``ftsim: ...``; 3 when ``run`` or ``sweep`` finished but some
replication did not finish training within ``run.max_wall_factor`` × the failure-free time;
130 on Ctrl-C, after saying what was kept; 141 when the output is piped into a reader that
stops early (``| head``), quietly, as if killed by SIGPIPE. SIGTERM and SIGHUP are handled as
Ctrl-C (what was kept is said), with exit status 128 + the signal's number: 143 and 129.
A result that cannot be written (a full disk, a read-only file system) is one line naming
the path and the reason, exit status 2, with no half-written folder left; so is a worker
process that died (the out-of-memory killer's SIGKILL), with what was kept. On a terminal
that cannot show a character (an ASCII locale), an ASCII look-alike is printed instead.
Unexpected exceptions are bugs and keep their traceback.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import os
import re
import shlex
import sys
import threading
import typing
import warnings
from pathlib import Path

from ftsim import console
from ftsim.experiments import interrupts
from ftsim.experiments.folders import FolderError
from ftsim.experiments.output import OutputError
from ftsim.experiments.study import EXECUTORS
from ftsim.options import command_line

EXIT_USAGE = 2
EXIT_UNFINISHED = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class UsageError(Exception):
    """Bad command-line input: printed as is, exit status 2."""


def _path(text: str) -> Path:
    """A path argument; an empty one is refused (``-o ''`` wrote into the current folder)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (give a file or folder)")
    return Path(text)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv``; returns the exit status (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    for name in ("stdout", "stderr"):  # closed by the caller (>&-): Python made it None,
        if getattr(sys, name) is None:  # and the first print or flush was a traceback
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (the process's own)
    with console.whole_writes(), console.ascii_fallbacks():
        try:
            with interrupts.handled(), command_line():
                args = _parser().parse_args(_negative_shares_attached(argv))
                with warnings.catch_warnings():
                    warnings.showwarning = _show_warning
                    status = _dispatch(args, argv)
                sys.stdout.flush()
        except BrokenPipeError:
            # Standard output was closed by its reader: point it at /dev/null so that the
            # interpreter's final flush does not fail again, and end like a SIGPIPE'd tool.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_BROKEN_PIPE
        except KeyboardInterrupt:  # a signal before or after the command did its work
            return interrupts.exit_status()
        except OSError as exc:
            # Every file ftsim writes is named by OutputError: an OSError without a file
            # name that says the disk is full comes from standard output redirected to it.
            if exc.filename is not None or exc.errno not in _FULL_DISK:
                raise
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print(f"ftsim: {exc.strerror.lower()} writing standard output", file=sys.stderr)
            return EXIT_USAGE
        return interrupts.exit_status() if status == EXIT_INTERRUPTED else status


_FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def command() -> typing.NoReturn:
    """The ``ftsim`` program: :func:`main` on the command line's arguments, then
    :func:`exit_quickly` with its status.

    OpenBLAS is told to run one thread (``OPENBLAS_NUM_THREADS=1``) unless the environment
    says otherwise, before NumPy loads it: the program's BLAS work runs on one thread anyway
    (:mod:`ftsim.trainer.blas`), and with more allowed, OpenBLAS starts a thread as NumPy
    loads that spins some 0.1 s of CPU before it sleeps (OpenBLAS 0.3.31, 2 CPUs: ``run
    prod50h --no-trainer`` takes 0.60 s of CPU instead of 0.70, the same wall time and
    results)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    exit_quickly(main())


def exit_quickly(status: int) -> typing.NoReturn:
    """End the program with exit status ``status``: the exit handlers run (:mod:`atexit`),
    the standard streams are flushed, and the process ends at once (:func:`os._exit`),
    without the interpreter's tear-down, which collects and frees every object and module
    one by one (after ``run prod50h``: some 0.05-0.09 s of an 0.7 s command, for nothing
    the command needs). Every file ftsim writes is closed by then (written atomically,
    :mod:`ftsim.experiments.output`). The ordinary exit instead while a thread that the
    interpreter would wait for is still running, or when a stream cannot be flushed (it
    reports that as it always did), or under a profiler or tracer (``python -m cProfile -m
    ftsim``, coverage: they write their results once the program returns to them)."""
    main_thread = threading.main_thread()
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    if not watched and all(t.daemon or t is main_thread for t in threading.enumerate()):
        atexit._run_exitfuncs()  # what the interpreter runs at exit (then: nothing again)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            raise SystemExit(status) from None
        os._exit(status)
    raise SystemExit(status)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A scenario's warning as its located line on standard error, a notice (a decision
    taken for the user, a deprecated name) as ``ftsim: warning: …``; others as Python's."""
    from ftsim.notices import Notice
    from ftsim.scenario.notices import ScenarioWarning

    if issubclass(category, ScenarioWarning):
        print(message, file=sys.stderr)
    elif issubclass(category, Notice):
        print(f"ftsim: warning: {message}", file=sys.stderr)
    else:
        (file or sys.stderr).write(
            warnings.formatwarning(message, category, filename, lineno, line)
        )


def _dispatch(args, argv: list[str]) -> int:
    """Run the command; known kinds of bad input become one-line messages and exit 2."""
    from ftsim.scenario.loader import ScenarioError

    try:
        with interrupts.unwrapped():
            return args.handler(args, argv)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
    except (UsageError, FolderError, OutputError) as exc:
        print(f"ftsim: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print("ftsim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise
    except OSError as exc:
        if exc.filename is None:  # not about a path the user gave: a bug or the system
            raise
        print(f"ftsim: {exc.filename}: {exc.strerror}", file=sys.stderr)
    except ValueError as exc:
        if not _bad_data(exc):
            raise
        print(f"ftsim: {exc}", file=sys.stderr)
    except Exception as exc:
        if not _worker_died(exc):
            raise
        print(f"ftsim: {exc}", file=sys.stderr)
    return EXIT_USAGE


def _bad_data(exc: ValueError) -> bool:
    """Whether ``exc`` is bad input found in a data file while training (a malformed line
    of a Criteo file), which the scenario could not be checked for in advance."""
    from ftsim.trainer.criteo import CriteoFormatError

    return isinstance(exc, CriteoFormatError)


def _worker_died(exc: Exception) -> bool:
    """Whether ``exc`` says that a worker process died (killed by the out-of-memory killer,
    say): a fault of the machine, said in a line (with what was kept), not a bug. (Only a
    command that made a pool can raise it: its module is not imported for the others.)"""
    pool = sys.modules.get("ftsim.experiments.pool")
    return pool is not None and isinstance(exc, pool.WorkerDied)


def _parser() -> argparse.ArgumentParser:
    from ftsim import __version__

    parser = argparse.ArgumentParser(
        prog="ftsim", description="Simulate fault-tolerance strategies for recommendation training."
    )
    parser.add_argument("--version", action="version", version=f"ftsim {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run every policy of a scenario over replications")
    run.add_argument("scenario", type=_path)
    _scenario_options(run)
    run.add_argument("-o", "--output", type=_path, help="run folder (default: under run.output)")
    _force_option(run)
    run.add_argument(
        "--policy",
        action="append",
        default=[],
        help="only this policy (repeatable; selected before --set applies)",
    )
    run.add_argument("--jobs", type=int, help="parallel worker processes (default: the CPU count)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar or table")
    run.set_defaults(handler=_cmd_run)

    show = commands.add_parser(
        "show", help="print a resolved scenario, the policies, the reference or the presets"
    )
    show_what = show.add_subparsers(dest="what", required=True)
    config = show_what.add_parser("config", help="the scenario with defaults filled in, in units")
    config.add_argument("scenario", type=_path)
    _scenario_options(config)
    config.set_defaults(handler=_cmd_show_config)
    policies = show_what.add_parser("policies", help="registered policies and their parameters")
    policies.set_defaults(handler=_cmd_show_policies)
    reference = show_what.add_parser(
        "reference", help="the scenario file reference (Markdown), generated from the schema"
    )
    reference.set_defaults(handler=_cmd_show_reference)
    presets = show_what.add_parser(
        "presets", help="published failure rates usable as failures: [{preset: NAME}]"
    )
    presets.set_defaults(handler=_cmd_show_presets)
    _sweep_parser(commands)
    _advise_parser(commands)
    _plot_parser(commands)
    _trace_parser(commands)
    _validate_parser(commands)
    return parser


def _sweep_parser(commands) -> None:
    sweep = commands.add_parser(
        "sweep", help="run every policy at every point of a grid, resumably, in parallel"
    )
    sweep.add_argument("scenario", type=_path)
    _scenario_options(sweep)
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="sweep a field over values, e.g. --grid 'policies.*.interval=15 min,1 h' (* sets "
        "every selected policy that has the field; repeatable; adds to or replaces the "
        "scenario's sweep.grid)",
    )
    sweep.add_argument(
        "--policy",
        action="append",
        default=[],
        help="only this policy (repeatable; selected before --set and --grid apply)",
    )
    sweep.add_argument("--reference", help="policy for paired differences (default: first)")
    sweep.add_argument("--jobs", type=int, help="parallel workers (default: the CPU count)")
    sweep.add_argument("--executor", choices=EXECUTORS, default="process")
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
    sweep.add_argument("--resume", type=_path, metavar="RUN_DIR", help="continue this sweep")
    sweep.add_argument("-o", "--output", type=_path, help="run folder (default: under run.output)")
    _force_option(sweep)
    sweep.add_argument("-q", "--quiet", action="store_true", help="no progress bar or table")
    sweep.set_defaults(handler=_cmd_sweep)


def _advise_parser(commands) -> None:
    advise = commands.add_parser(
        "advise",
        help="the cheapest setting of each policy within a PLS and a memory limit, searched "
        "with the simulator",
    )
    advise.add_argument("scenario", type=_path)
    _scenario_options(advise, "replications per candidate (default: the scenario's)", False)
    advise.add_argument(
        "--max-pls",
        type=share,
        help="limit on the mean PLS (the time model's pls_model): 0.05 or 5%%",
    )
    advise.add_argument(
        "--max-memory-overhead",
        type=share,
        metavar="F",
        help="limit on the extra memory per embedding PS, as a share of its shard (0.5 or 50%%)",
    )
    advise.add_argument(
        "--policy", action="append", default=[], help="only this policy (repeatable)"
    )
    advise.add_argument(
        "--jobs", type=int, help="parallel worker processes (default: the CPU count)"
    )
    advise.add_argument(
        "-o", "--output", type=_path, help="folder for candidates.csv and the frontier figure"
    )
    _force_option(advise)
    advise.add_argument("-q", "--quiet", action="store_true", help="no table")
    advise.set_defaults(handler=_cmd_advise)


def _plot_parser(commands) -> None:
    plot = commands.add_parser("plot", help="paper figures from a run or sweep folder")
    plot.add_argument("run_dir", type=_path, metavar="RUN_DIR")
    plot.add_argument(
        "-o",
        "--output",
        type=_path,
        metavar="DIR",
        help="folder for the figures (default RUN_DIR/plots)",
    )
    plot.add_argument(
        "--format",
        default="pdf,png",
        metavar="pdf,png,svg",
        help="image formats, comma-separated (default pdf,png; the CSV is always written)",
    )
    plot.add_argument(
        "--point",
        type=int,
        help="draw the breakdown and timeline at this sweep point, into a point_N/ folder "
        "beside the other figures (default: each policy's best point)",
    )
    plot.add_argument(
        "--max-pls",
        type=share,
        metavar="X",
        help="the breakdown's best point of each policy: its cheapest with PLS at most X "
        "(0.05 or 5%%)",
    )
    plot.add_argument(
        "--breakdown-scale",
        choices=("auto", "linear", "log"),
        default="auto",
        help="x axis of the breakdown (default auto: log when the bars span more than 10x)",
    )
    plot.add_argument(
        "--interval-scale",
        choices=("auto", "linear", "log"),
        default="auto",
        help="y axis of the interval figure (default auto: log when the points span more than 10x)",
    )
    plot.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    plot.set_defaults(handler=_cmd_plot)


def _trace_parser(commands) -> None:
    trace = commands.add_parser(
        "trace", help="a replication of a run as a Chrome/Perfetto trace (JSON), per node and link"
    )
    trace.add_argument("run_dir", type=_path, metavar="RUN_DIR")
    trace.add_argument("--rep", type=int, default=0, help="replication (default 0)")
    trace.add_argument(
        "--policy", action="append", default=[], help="only this policy (repeatable; default all)"
    )
    trace.add_argument(
        "-o", "--output", type=_path, help="trace file (default RUN_DIR/trace_repN.json; .gz: gzip)"
    )
    trace.add_argument(
        "--force", action="store_true", help="replace an existing file that is not a trace"
    )
    trace.set_defaults(handler=_cmd_trace)


def _validate_parser(commands) -> None:
    validate = commands.add_parser(
        "validate", help="run the validation suite and write a report with figures"
    )
    validate.add_argument(
        "-o",
        "--output",
        type=_path,
        help="report path (default results/validation/validation.md; figures in a folder "
        "named like the report without .md)",
    )
    validate.add_argument(
        "--update-docs",
        action="store_true",
        help="write the report to docs/validation.md (figures in docs/validation/) of the "
        "source checkout",
    )
    validate.add_argument(
        "--force", action="store_true", help="replace an -o file that is not a validation report"
    )
    validate.add_argument(
        "--quick", action="store_true", help="fewer replications (statistical checks may fail)"
    )
    validate.set_defaults(handler=_cmd_validate)


def _force_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty -o folder that holds no earlier output of this command",
    )


def _scenario_options(
    parser: argparse.ArgumentParser,
    reps: str = "same as --set run.replications=N",
    trainer: bool = True,
) -> None:
    """``--set``, ``--seed``, ``--reps`` (its help: ``reps``) and, with ``trainer``,
    ``--no-trainer`` (else always timing only, as ``advise`` is)."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field, e.g. --set policies.0.interval='30 min' (repeatable)",
    )
    parser.add_argument("--seed", type=int, help="same as --set run.seed=N")
    parser.add_argument("--reps", type=int, help=reps)
    if not trainer:
        parser.set_defaults(no_trainer=False)
        return
    parser.add_argument(
        "--no-trainer",
        action="store_true",
        help="timing only: do not train the embedded model (same as --set trainer.enabled=false)",
    )


def _load(args):
    from ftsim.policies import catalog  # noqa: F401 (the kinds a scenario may name)
    from ftsim.scenario.loader import load_scenario
    from ftsim.sim.failures import source_notes

    scenario = load_scenario(args.scenario, _overrides(args), getattr(args, "policy", None))
    if not getattr(args, "quiet", False):
        for line in source_notes(scenario):  # e.g. the rows a failure log skipped
            print(line, file=sys.stderr)
    return scenario


def share(text: str) -> float:
    """An option's share (a PLS, a memory overhead): a number, ``0.05``, or a percentage,
    ``5%`` (0.05)."""
    number = text.strip().removesuffix("%")
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number such as 0.05, or a percentage such as 5% (got {text!r})"
        ) from None
    return value / 100 if number != text.strip() else value


SHARE_OPTIONS = ("--max-pls", "--max-memory-overhead")
"""Options whose value is a :func:`share`."""


def _negative_shares_attached(argv: list[str]) -> list[str]:
    """``argv`` with a negative value of a share option attached to it (``--max-pls -5%`` as
    ``--max-pls=-5%``): argparse takes a lone ``-5%`` for an option and said "expected one
    argument"; attached, the value reaches the check that names what is wrong with it."""
    out = []
    for arg in argv:
        if out and out[-1] in SHARE_OPTIONS and arg[:2] in {f"-{d}" for d in "0123456789."}:
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _overrides(args) -> list[str]:
    """``--set`` assignments plus those the shorthand options stand for (checked here, so
    that a bad one is named as typed, not as the field it sets)."""
    for name, value, least in (("--reps", args.reps, 1), ("--seed", args.seed, 0)):
        if value is not None and value < least:
            raise UsageError(f"{name} must be at least {least} (got {value})")
    overrides = list(args.overrides)
    shorthands = (
        ("--seed", args.seed is not None, f"run.seed={args.seed}"),
        ("--reps", args.reps is not None, f"run.replications={args.reps}"),
        ("--no-trainer", args.no_trainer, "trainer.enabled=false"),
    )
    for option, given, assignment in shorthands:
        if not given:
            continue
        key = assignment.partition("=")[0]
        if any(o.partition("=")[0].strip() == key for o in args.overrides):
            raise UsageError(f"{option} and --set {key} both given: give one")  # else one won
        overrides.append(assignment)
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
    from ftsim.experiments import study
    from ftsim.experiments.progress import Progress
    from ftsim.experiments.tables import run_table

    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    plan = study.plan(args.scenario, _overrides(args), policies=args.policy, command="run")
    progress = Progress("run", args.quiet)
    try:
        outcome = study.execute(
            plan,
            args.output,
            force=args.force,
            jobs=args.jobs,
            argv=["ftsim", *argv],
            progress=progress,
            say=_say,  # decisions taken for the user are said, quiet or not
        )
    except study.StudyInterrupted as stop:
        with interrupts.shielded():  # one more Ctrl-C: the report is still made
            kept = "the results were written" if stop.committed else "nothing was written"
            print(f"ftsim: interrupted; {kept} to {stop.folder}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        progress.close()
    if not args.quiet:
        print(run_table(outcome.records))
        print(f"results: {outcome.folder}")
    return _result_status(outcome)


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _result_status(outcome) -> int:
    """Say on standard error what the results need said with them (unfinished
    replications, a ``target_pls`` missed: :func:`ftsim.experiments.study.result_warnings`):
    exit status 3 if a replication did not finish, else 0."""
    from ftsim.experiments.study import result_warnings
    from ftsim.notices import UnfinishedReplications

    notices = result_warnings(outcome)
    unfinished = [n for n in notices if isinstance(n, UnfinishedReplications)]
    for notice in notices:
        prefix = "warning: " if notice in unfinished else "ftsim: warning: "
        print(f"{prefix}{notice}", file=sys.stderr)
    return EXIT_UNFINISHED if unfinished else 0


def _cmd_sweep(args, argv) -> int:
    from ftsim.experiments import study
    from ftsim.experiments.progress import Progress
    from ftsim.experiments.tables import sweep_table

    try:
        study.check_sweep_options(
            jobs=args.jobs,
            batch=args.batch,
            max_reps=args.max_reps,
            target_halfwidth=args.target_halfwidth,
            executor=args.executor,
            dask_address=args.dask_address,
            out=args.output,
            resume=args.resume,
            force=args.force,
        )
    except study.StudyError as exc:
        raise UsageError(str(exc)) from None
    plan = study.plan(
        args.scenario,
        _overrides(args),
        args.grid,
        args.policy,
        reference=args.reference,
        target_halfwidth=args.target_halfwidth,
        max_reps=args.max_reps,
    )
    progress = Progress("sweep", args.quiet)
    try:
        outcome = study.execute(
            plan,
            args.resume or args.output,
            force=args.force,
            resume=args.resume is not None,
            executor=args.executor,
            jobs=args.jobs,
            dask_address=args.dask_address,
            batch=args.batch,
            argv=["ftsim", *argv],
            progress=progress,
            say=_say,
        )
    except study.StudyInterrupted as stop:
        with interrupts.shielded():  # one more Ctrl-C: the report is still made whole
            kept, again = stop.kept(), resume_command(argv, stop.folder)
            print(f"ftsim: interrupted; {kept} are saved in {stop.folder}", file=sys.stderr)
            print(f"ftsim: continue with: {again}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        progress.close()
    if not args.quiet:
        print(sweep_table(outcome.records, plan.columns))
    copied = (
        f" ({outcome.copied} of them copied: the policy is the same as at an earlier point)"
        if outcome.copied
        else ""
    )
    print(f"computed {outcome.computed}{copied}, reused {outcome.reused} (replications)")
    print(f"results: {outcome.folder}")
    return _result_status(outcome)


def _cmd_advise(args, argv) -> int:
    """Exit status 0 with a recommendation, 1 when no setting of any policy meets the
    limits (said on standard output)."""
    from ftsim.experiments import advise
    from ftsim.experiments.pool import default_jobs
    from ftsim.experiments.study import StudyError

    try:
        result = advise.execute(
            args.scenario,
            _overrides(args),
            args.output,
            force=args.force,
            argv=["ftsim", *argv],
            max_pls=args.max_pls,
            max_memory_overhead=args.max_memory_overhead,
            policies=args.policy or None,
            jobs=default_jobs() if args.jobs is None else args.jobs,
        )
    except StudyError as exc:
        raise UsageError(str(exc)) from None
    if not args.quiet:
        print(result.text())
    names = ", ".join(f.name for f in result.files if f.name != "manifest.json")
    print(f"results: {result.folder} ({names})")
    return 0 if result.recommendation is not None else 1


def resume_command(argv: list[str], folder: Path) -> str:
    """The command line that continues the sweep of ``argv`` in ``folder``: the same
    arguments without ``-o``/``--output``/``--resume`` and ``--force`` (refused with
    ``--resume``: the line printed after a stopped ``--force`` did not run), plus
    ``--resume FOLDER``."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--force":
            continue
        elif arg in ("-o", "--output", "--resume"):
            skip = True
        elif not arg.startswith(("--output=", "--resume=")) and not (
            arg.startswith("-o") and not arg.startswith("--")
        ):
            kept.append(arg)
    program = "python -m ftsim" if Path(sys.argv[0]).name == "__main__.py" else "ftsim"
    return f"{program} {shlex.join([*kept, '--resume', str(folder)])}"


def _cmd_plot(args, argv) -> int:
    from ftsim.plots import OptionError, plot_run

    try:
        plot_run(
            args.run_dir,
            args.output,
            args.format,
            args.point,
            quiet=args.quiet,
            breakdown_scale=args.breakdown_scale,
            interval_scale=args.interval_scale,
            max_pls=args.max_pls,
        )
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    return 0


def _cmd_trace(args, argv) -> int:
    from ftsim.experiments.lock import settle
    from ftsim.experiments.trace import (
        TraceError,
        build_trace,
        check_trace_file,
        edited_scenario,
        mismatches,
        read_run_folder,
        write_trace,
    )

    settle(args.run_dir)  # the moves of a run killed while making them are completed
    try:
        scenario, rows = read_run_folder(args.run_dir)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    indices = _selected_policies(scenario, args.policy)
    reps = scenario.run.replications
    if not 0 <= args.rep < reps:
        raise UsageError(f"--rep: the run has replications 0 to {reps - 1} (got {args.rep})")
    names = "_".join(scenario.policy_labels[i] for i in indices) if args.policy else ""
    default = f"trace_rep{args.rep}{'_' if names else ''}{names}.json"
    out = args.output or args.run_dir / default
    if out.is_dir():  # -o DIR: the default name inside it
        out = out / default
    try:
        check_trace_file(out, args.force)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    trace, sims = build_trace(scenario, indices, args.rep)
    write_trace(out, trace)
    edited = edited_scenario(args.run_dir, scenario)
    for line in mismatches(sims, rows, edited) or ([f"warning: {edited}"] if edited else []):
        print(line, file=sys.stderr)
    labels = ", ".join(scenario.policy_labels[i] for i in indices)
    print(f"trace: {out} ({len(trace['traceEvents'])} events; {labels}; replication {args.rep})")
    print("open it in the Perfetto UI (ui.perfetto.dev: Open trace file) or chrome://tracing")
    return 0


def _cmd_show_config(args, argv) -> int:
    import yaml

    scenario = _load(args)
    print(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def _cmd_show_policies(args, argv) -> int:
    from ftsim.policies.catalog import policy_params

    for kind, params in policy_params().items():
        doc = (sys.modules[params.__module__].__doc__ or "").strip().split("\n\n")[0]
        summary = re.sub(r"^(``\w+``(, )?)+: ", "", " ".join(doc.split()))  # the kinds again
        print(f"{kind}: {_plain(_first_sentence(summary))}")
        _print_fields(params, "    ")
    return 0


def _first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence (a full stop before a blank and a
    capital letter or the end), whole: a module's summary may run over several lines."""
    match = re.search(r"\.(?=\s+[A-Z(]|$)", text)
    return text[: match.end()] if match else text


def _plain(text: str) -> str:
    """``text`` without reStructuredText markup (``literal``, :role:`target`)."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    return text.replace("``", "")


def _print_fields(model, indent: str) -> None:
    """One line per field of ``model``; the fields of a section (or list of sections) of
    its own below it, indented (a composed policy's parts and their scope)."""
    from pydantic import BaseModel

    from ftsim.scenario.reference import field_type

    for name, field in model.model_fields.items():
        if name == "kind":
            continue
        described = _plain(field.description or "")
        default = "required" if field.is_required() else f"default {field.default!r}"
        if "(default" not in described:  # a description that says its default already
            described += f" ({default})"
        kind_of_value = field_type(field, name).replace("`", "")
        print(f"{indent}{name}: {described.strip()} [{kind_of_value}]")
        inner = field.annotation
        while typing.get_origin(inner) in (list, typing.Annotated):
            inner = typing.get_args(inner)[0]
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            _print_fields(inner, indent + "    ")


def _cmd_show_presets(args, argv) -> int:
    from ftsim.sim.presets import MAPPING, PRESETS, describe

    print(MAPPING)
    for preset in PRESETS.values():
        print()
        print(describe(preset))
    return 0


def _cmd_show_reference(args, argv) -> int:
    from ftsim.policies.catalog import policy_params
    from ftsim.scenario.reference import scenario_reference

    policy_params()  # every kind: the reference describes them all
    sys.stdout.write(scenario_reference())
    return 0


def _cmd_validate(args, argv) -> int:
    from ftsim.validation.suite import all_passed, results_table, validate

    report = _validation_report(args)

    def progress(section) -> None:
        for check in section.checks:
            verdict = "PASS" if check.passed else "FAIL"
            print(f"{verdict}  {check.name}: {check.measured}", flush=True)

    sections = validate(report, quick=args.quick, progress=progress)
    print(results_table(sections))
    print(f"report: {report}")
    return 0 if all_passed(sections) else 1


def _validation_report(args) -> Path:
    """Where ``validate`` writes: -o, the checkout's docs with --update-docs, or the default
    under results/. Checked before the (long) run: the report must be a new file or an
    earlier report (else --force), and its folder and figure folder writable."""
    from ftsim.experiments.folders import make_writable_folder
    from ftsim.validation.suite import DEFAULT_REPORT, docs_report, figures_folder, is_report

    if args.update_docs and args.output:
        raise UsageError("--update-docs writes docs/validation.md; leave out -o")
    report = args.output or DEFAULT_REPORT
    if args.update_docs:
        report = docs_report()
        if report is None:
            raise UsageError("--update-docs: no docs/ folder next to the ftsim package")
    if report.is_dir():
        raise UsageError(f"-o {report}: is a folder; give the path of a Markdown file")
    if not report.suffix:
        raise UsageError(
            f"-o {report}: give a file name with a suffix, e.g. {report}.md (the figures go "
            f"to the folder named without it, {report})"
        )
    if report.exists() and not args.force and not is_report(report):
        raise UsageError(
            f"-o {report}: the file exists and is not a validation report; choose another "
            "path, or pass --force to replace it"
        )
    make_writable_folder(report.parent)
    make_writable_folder(figures_folder(report))
    return report
