"""The program loads OpenBLAS on one thread (:func:`ftsim.cli.command`): its BLAS work runs
on one thread anyway, and an OpenBLAS allowed more starts a thread as NumPy loads that spins
some 0.1 s of CPU. A user's own ``OPENBLAS_NUM_THREADS`` is kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# the program with its command replaced by one that loads NumPy and prints the number of
# threads its BLAS got; ``ENTRY`` is how the program is entered
PROGRAM = """
import sys
import ftsim.cli as cli
assert "numpy" not in sys.modules  # the setting must come before NumPy loads its BLAS

def report(argv=None):
    import numpy  # noqa: F401
    from threadpoolctl import threadpool_info
    print(max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"))
    return 0

cli.main = report
ENTRY
"""


def _blas_threads(entry: str, **env: str) -> int:
    environment = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.replace("ENTRY", entry)],
        capture_output=True,
        text=True,
        env={**environment, **env},
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_the_program_loads_openblas_on_one_thread():
    assert _blas_threads("cli.command()") == 1


def test_a_users_own_setting_is_kept():
    assert _blas_threads("cli.command()", OPENBLAS_NUM_THREADS="2") == 2


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS runs one thread here anyway")
def test_without_the_setting_openblas_would_load_more_threads():
    """The premise (what the first test would see without the program's setting): entered
    past :func:`~ftsim.cli.command`, NumPy loads OpenBLAS with a thread per CPU."""
    assert _blas_threads("cli.exit_quickly(cli.main())") > 1
