"""Docs that run: every command of README.md and docs/user_guide.md is executed, and every
usage synopsis is compared with the command-line parser, so neither can drift.

Conventions (also in docs/user_guide.md, "Keeping this guide true"): a code block is a
list of commands; in a block with ``$ `` lines, the lines after a command are its expected
output (``...`` stands for lines left out). An HTML comment ``<!-- docs-test: KEY ARGS -->``
before a block says how to test it: ``exit 2`` (accepted exit statuses, default 0),
``append ARGS`` (appended to each ``python -m ftsim`` command: an expensive example made
cheap), ``usage`` (a synopsis, not run), ``background`` (services started before the next
commands), ``install`` (set-up commands, run as written only with FTSIM_TEST_INSTALL=1).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ftsim.cli import _parser
from tests.conftest import ROOT

DOCS = (ROOT / "README.md", ROOT / "docs" / "user_guide.md")
SHELL_FENCES = {"", "sh", "bash", "console", "shell"}
FTSIM = "python -m ftsim"
DASK_PORT = "8786"
try:
    import distributed  # noqa: F401  (the `dask` extra: its blocks run only when installed)

    HAS_DASK = True
except ImportError:
    HAS_DASK = False


def needs_dask(block) -> bool:
    """Whether a block starts Dask services or sweeps on a Dask cluster."""
    return any(re.search(r"^dask |--executor dask", c.text) for c in block.commands)


SETUP_STEPS = ("python3 -m venv .venv", ". .venv/bin/activate", "python -m pytest")
"""Parts of the install commands that need no check of their own offline: creating and
activating the environment, and running this very test suite."""
TIMEOUT_S = 1800


@dataclass
class Command:
    text: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    """A code block of a document: where it starts, its commands and its directives."""

    doc: Path
    line: int
    commands: list[Command]
    prompted: bool
    """Written with ``$ `` prompts (commands with expected output)."""
    directives: dict[str, str]

    @property
    def where(self) -> str:
        return f"{self.doc.name}:{self.line}"

    @property
    def statuses(self) -> set[int]:
        return {int(s) for s in self.directives.get("exit", "0").split()}


def blocks(doc: Path) -> list[Block]:
    """The shell code blocks of ``doc`` (indented or fenced), with their directives."""
    lines = doc.read_text().splitlines()
    found, directives, i = [], {}, 0
    while i < len(lines):
        line = lines[i]
        directive = re.fullmatch(r"<!-- docs-test: (\w+) ?(.*?) -->", line.strip())
        if directive:
            directives[directive[1]] = directive[2]
        elif line.startswith("```"):
            end = lines.index("```", i + 1)
            if line[3:].strip() in SHELL_FENCES:
                found.append(_block(doc, i + 2, lines[i + 1 : end], directives))
            directives, i = {}, end
        elif line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            found.append(_block(doc, i + 1, [text[4:] for text in lines[i:end]], directives))
            directives, i = {}, end - 1
        elif line.strip():
            directives = {}
        i += 1
    return found


def _block(doc: Path, line: int, text: list[str], directives: dict[str, str]) -> Block:
    prompted = any(t.startswith("$ ") for t in text)
    commands: list[Command] = []
    for t in text:
        if prompted and t.startswith("$ "):
            commands.append(Command(t[2:]))
        elif prompted and commands and t.strip():
            commands[-1].expected.append(t)
        elif not prompted and t[:1].isspace() and commands:
            commands[-1].text += " " + t.strip()  # a synopsis continued on the next line
        elif not prompted and t.strip():
            commands.append(Command(t))
    return Block(doc, line, commands, prompted, dict(directives))


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in blocks(doc)]


# -- synopses against the parser ---------------------------------------------------------


def leaf_parsers(parser: argparse.ArgumentParser, name: str = "") -> dict[str, object]:
    """Every runnable command (``run``, ``show config``, …) and its parser."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found.update(leaf_parsers(sub, f"{name} {sub_name}".strip()))
    return found or {name: parser}


def option_groups(parser) -> list[set[str]]:
    """The spellings of each option (``{'-o', '--output'}``), help aside."""
    return [
        set(a.option_strings)
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction)
    ]


def split_synopsis(text: str, commands: dict) -> tuple[str, set[str]]:
    """The command a synopsis line is about and the options it names."""
    assert text.startswith(FTSIM + " "), f"not an ftsim synopsis: {text}"
    rest = text[len(FTSIM) + 1 :]
    name = max((c for c in commands if f"{rest} ".startswith(f"{c} ")), key=len, default=None)
    assert name is not None, f"no such command: {text}"
    return name, set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", rest[len(name) :]))


def usage_lines() -> list[tuple[Block, Command]]:
    return [(b, c) for b in all_blocks() if "usage" in b.directives for c in b.commands]


@pytest.mark.parametrize(
    "block,command",
    usage_lines(),
    ids=[f"{b.where}:{' '.join(c.text.split()[3:5])}" for b, c in usage_lines()],
)
def test_a_synopsis_names_exactly_the_options_of_its_command(block, command):
    commands = leaf_parsers(_parser())
    name, named = split_synopsis(command.text, commands)
    groups = option_groups(commands[name])
    known = set().union(*groups)
    assert named <= known, f"{block.where}: {name} has no option {sorted(named - known)}"
    missing = [sorted(g)[-1] for g in groups if not g & named]
    assert not missing, f"{block.where}: the synopsis of {name} leaves out {missing}"


def test_readme_usage_covers_every_command():
    commands = leaf_parsers(_parser())
    readme = [c for b, c in usage_lines() if b.doc.name == "README.md"]
    documented = [split_synopsis(c.text, commands)[0] for c in readme]
    assert sorted(documented) == sorted(commands)


def test_every_block_is_commands_or_marked():
    """A block without ``$`` prompts is a synopsis, set-up or services: it must say which."""
    kinds = {"usage", "install", "background"}
    unmarked = [b.where for b in all_blocks() if not b.prompted and not kinds & set(b.directives)]
    assert not unmarked, f"mark these blocks (see tests/test_docs.py): {unmarked}"


# -- running the commands ----------------------------------------------------------------


def normalize(line: str) -> str:
    """An output line with hashes and numbers masked and runs of blanks collapsed, so that
    a documented output matches a run with other numbers (fewer replications, other load)."""
    line = re.sub(r"\b[0-9a-f]{12}\b", "<hash>", line)
    line = re.sub(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", line)
    return " ".join(line.split())


class Session:
    """Runs a document's commands in a scratch folder, in order (later commands read what
    earlier ones wrote). ``/tmp/`` in a command means the scratch folder."""

    def __init__(self, tmp_path: Path):
        self.scratch = tmp_path / "scratch"
        self.work = tmp_path / "work"
        self.scratch.mkdir()
        self.work.mkdir()
        for name in ("scenarios", "benchmarks"):
            (self.work / name).symlink_to(ROOT / name)
        paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        }
        self.replacements = {"/tmp/": f"{self.scratch}/"}
        self.services: list[subprocess.Popen] = []

    def expand(self, text: str) -> str:
        for old, new in self.replacements.items():
            text = text.replace(old, new)
        return text

    def run(self, block: Block, command: Command) -> None:
        """Run one command; check its exit status and that its documented lines appear."""
        text = self.expand(with_appended(command.text, block.directives.get("append", "")))
        result = subprocess.run(
            ["bash", "-c", text],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        output = result.stdout + result.stderr
        status = 128 - result.returncode if result.returncode < 0 else result.returncode
        context = f"{block.where}: $ {text}\n(exit {status})\n{output}"
        assert status in block.statuses, context  # killed by signal N: 128 + N, as in a shell
        produced = {normalize(line) for line in output.splitlines()}
        missing = [
            line
            for line in command.expected
            if line.strip() != "..." and normalize(self.expand(line)) not in produced
        ]
        assert not missing, f"documented output not produced: {missing}\n{context}"

    def start(self, block: Block) -> None:
        """Start a block's services (Dask scheduler and workers) on a free local port."""
        self.replacements |= {"SCHEDULER_HOST": "127.0.0.1", DASK_PORT: str(free_port())}
        for command in block.commands:
            self.services.append(
                subprocess.Popen(
                    ["bash", "-c", "exec " + self.expand(command.text)],
                    cwd=self.work,
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )

    def stop(self) -> None:
        for service in self.services:
            if service.poll() is None:
                os.killpg(service.pid, signal.SIGTERM)
                service.wait(timeout=60)

    def check_install(self, block: Block) -> None:
        """Offline check of set-up commands: run their ftsim parts (with the block's
        ``append``), and find the extras they install in pyproject.toml."""
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        extras = extras["optional-dependencies"]
        for command in block.commands:
            for part in (p.strip() for p in command.text.split("#")[0].split("&&")):
                if part.startswith(FTSIM):
                    self.run(block, Command(part))
                elif part.startswith("pip install -e "):
                    spec = shlex.split(part)[-1]
                    wanted = re.findall(r"\w+", spec[spec.find("[") :]) if "[" in spec else []
                    assert set(wanted) <= set(extras), f"{block.where}: {part}"
                else:
                    assert part in SETUP_STEPS, f"{block.where}: unknown set-up step {part!r}"


def with_appended(text: str, extra: str) -> str:
    """``text`` with ``extra`` arguments after every ``python -m ftsim`` command in it."""
    if not extra:
        return text
    return "&&".join(
        re.sub(r"\s*$", lambda end: f" {extra}{end[0]}", part, count=1)
        if part.strip().startswith(FTSIM)
        else part
        for part in text.split("&&")
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_command_runs_as_documented(doc, tmp_path):
    session = Session(tmp_path)
    try:
        for block in blocks(doc):
            if needs_dask(block) and not HAS_DASK:
                continue  # the optional extra is not installed
            if "usage" in block.directives:
                for command in block.commands:  # a synopsis without placeholders runs
                    if not re.search(r"[A-Z]{3,}|\[", command.text):
                        session.run(block, command)
            elif "install" in block.directives:
                session.check_install(block)
            elif "background" in block.directives:
                session.start(block)
            else:
                for command in block.commands:
                    session.run(block, command)
    finally:
        session.stop()


@pytest.mark.skipif(
    os.environ.get("FTSIM_TEST_INSTALL") != "1",
    reason="downloads every dependency: set FTSIM_TEST_INSTALL=1 to run the set-up commands",
)
def test_install_commands_work_on_a_fresh_copy(tmp_path):
    """The set-up commands as written, in a copy of the committed files, without this
    environment (its own venv, no PYTHONPATH; the nested test run skips this test)."""
    copy = tmp_path / "ftsim"
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FTSIM_TEST_INSTALL")}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if Path(p) != Path(sys.executable).parent
    )
    for block in all_blocks():
        if "install" not in block.directives:
            continue
        for command in block.commands:
            result = subprocess.run(
                ["bash", "-c", command.text], cwd=copy, env=env, capture_output=True, text=True
            )
            assert result.returncode == 0, f"{block.where}: {command.text}\n{result.stderr}"


def test_the_harness_reads_blocks_directives_and_expected_output(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Text.\n\n<!-- docs-test: exit 2 -->\n<!-- docs-test: append --reps 2 -->\n\n"
        "    $ python -m ftsim run x.yaml\n    a 1.5%  b\n    ...\n    $ cmp a b\n\n"
        "Prose resets directives.\n\n```yaml\nkey: value\n```\n\n"
        "<!-- docs-test: usage -->\n\n    python -m ftsim plot RUN_DIR\n"
        "        [--point N]\n"
    )
    first, synopsis = blocks(doc)
    assert first.statuses == {2} and first.directives["append"] == "--reps 2"
    assert [c.text for c in first.commands] == ["python -m ftsim run x.yaml", "cmp a b"]
    assert first.commands[0].expected == ["a 1.5%  b", "..."]
    assert synopsis.commands[0].text == "python -m ftsim plot RUN_DIR [--point N]"
    assert with_appended("a && python -m ftsim run x", "-q") == "a && python -m ftsim run x -q"
    hashed = normalize("full 10.5% ±95% CI 0b99db898afd")
    assert normalize("full   8.24%  ±95% CI 10d0ebd1bb92") == hashed
    assert normalize("n = 20") != normalize("n: 20")
