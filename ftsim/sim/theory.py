"""Closed forms for periodic checkpointing with exponential failures (Young 1974, Daly 2006).

Symbols (all seconds): ``delta`` checkpoint cost, ``mtbf`` the job's mean time between
failures M, ``restart`` restart cost R (rescheduling + loading), ``tau`` compute between
checkpoints, ``solve`` failure-free compute time T_s.
"""

from __future__ import annotations

import math


def young_interval_s(delta: float, mtbf: float) -> float:
    """Young's first-order optimum τ* = √(2δM)."""
    return math.sqrt(2.0 * delta * mtbf)


def daly_interval_s(delta: float, mtbf: float) -> float:
    """Daly's higher-order optimum τ* = √(2δM)[1 + ⅓√(δ/2M) + (δ/2M)/9] − δ (M if δ ≥ 2M)."""
    if delta >= 2.0 * mtbf:
        return mtbf
    x = delta / (2.0 * mtbf)
    return math.sqrt(2.0 * delta * mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def daly_wall_s(solve: float, tau: float, delta: float, restart: float, mtbf: float) -> float:
    """Daly's expected wall time T_w = M e^{R/M} (e^{(τ+δ)/M} − 1) T_s / τ.

    Failures may also strike during checkpoints and restarts.
    """
    return mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf) * solve / tau


def first_order_waste(tau: float, delta: float, restart: float, mtbf: float) -> float:
    """Young's first-order fraction of time wasted: δ/τ + (τ/2 + R)/M."""
    return delta / tau + (tau / 2.0 + restart) / mtbf
