"""The trainer runs on one BLAS thread (:func:`ftsim.trainer.blas.one_blas_thread`),
without setting the limit again where it holds already (a pool worker: setting it starts
OpenBLAS's thread server anew, whose thread spins ~0.1 s of CPU)."""

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController, threadpool_limits

from ftsim.trainer.blas import one_blas_thread


def _blas():
    return ThreadpoolController().select(user_api="blas").lib_controllers


def _threads() -> list[int]:
    return [lib.num_threads for lib in _blas()]


def test_numpy_loads_a_blas():
    np.ones((2, 2)) @ np.ones((2, 2))
    assert _blas()


def test_a_blas_on_more_threads_runs_one_inside_and_gets_its_threads_back():
    with threadpool_limits(limits=2, user_api="blas"):
        before = _threads()
        if max(before) < 2:
            pytest.skip("this BLAS runs one thread at most")
        with one_blas_thread():
            assert _threads() == [1] * len(before)
        assert _threads() == before


def test_a_blas_already_on_one_thread_is_left_alone(monkeypatch):
    with threadpool_limits(limits=1, user_api="blas"), monkeypatch.context() as patch:
        for cls in {type(lib) for lib in _blas()}:
            patch.setattr(cls, "set_num_threads", _refuse)
        with one_blas_thread():
            assert set(_threads()) == {1}
        assert set(_threads()) == {1}
        patch.undo()  # before the outer limit restores the threads


def _refuse(self, num_threads):
    raise AssertionError(f"the BLAS limit was set again ({num_threads} threads)")
