"""BLAS on one thread: how the trainer runs, in a process of its own or in a pool's worker.

On one thread, results do not depend on how many threads a machine offers, and parallel
workers do not oversubscribe the cores (which slows OpenBLAS tenfold).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext


def one_blas_thread() -> AbstractContextManager:
    """BLAS limited to one thread for the block, restored after; nothing to do when every
    BLAS NumPy loaded runs one thread already (e.g. a pool worker, which inherits its
    parent's limit: :mod:`ftsim.experiments.pool`). Setting the limit again there is not
    free: in a forked child, OpenBLAS starts its thread server anew and the new thread spins
    some 0.1 s of CPU before it sleeps (measured: a child forked from a parent at one
    thread, 105 ms of CPU with the limit set, 2 ms with this check; OpenBLAS 0.3.31)."""
    from threadpoolctl import ThreadpoolController

    blas = ThreadpoolController().select(user_api="blas")
    if all(lib.num_threads == 1 for lib in blas.lib_controllers):
        return nullcontext()
    return blas.limit(limits=1)
