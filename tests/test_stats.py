"""The one statistics module against hand-computed values and scipy."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from ftsim.experiments.stats import (
    mean_ci,
    paired_differences,
    summarize,
    t_critical,
    t_interval,
    t_quantile,
)
from ftsim.experiments.tables import sweep_table

T_975_DF2 = 4.302652729749462  # scipy.stats.t.ppf(0.975, 2); printed tables: 4.303
T_975_DF3 = 3.1824463052837078  # scipy.stats.t.ppf(0.975, 3); printed tables: 3.182


@pytest.mark.parametrize("df", [1, 2, 3, 4, 9, 19, 30, 99, 200, 1000, 100_000])
@pytest.mark.parametrize("p", [0.025, 0.6, 0.75, 0.9, 0.95, 0.975, 0.99, 0.995, 0.9995])
def test_t_quantile_takes_a_probability_and_is_scipys_ppf(p, df):
    """To 1e-12 (1e-10 at huge df, where the CDF near 0.5 loses digits to cancellation)."""
    rel = 1e-12 if df <= 1000 and p >= 0.75 else 1e-10
    assert t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=rel)


def test_t_critical_takes_a_confidence_and_is_the_two_sided_value():
    """The two names cannot be confused silently: t_critical(0.95) is t_quantile(0.975),
    and t_quantile(0.95) (what the wrong import would give) is the 90% critical value."""
    assert t_critical(0.95, 2) == pytest.approx(T_975_DF2, rel=1e-12)
    assert t_critical(0.95, 3) == pytest.approx(T_975_DF3, rel=1e-12)
    assert t_critical(0.90, 9) == t_quantile(0.95, 9) < t_critical(0.95, 9)
    with pytest.raises(ValueError, match="confidence"):
        t_critical(95, 9)
    with pytest.raises(ValueError, match="p must be"):
        t_quantile(1.0, 9)


def test_mean_ci_is_the_t_interval_half_width():
    mean, half, n = mean_ci([1.0, 2.0, 3.0, 4.0])
    assert (mean, n) == (2.5, 4)
    assert half == pytest.approx(T_975_DF3 * math.sqrt(5 / 3) / 2, rel=1e-12)


def test_t_interval_by_hand():
    s = t_interval([1.0, 2.0, 3.0, 4.0])
    std = math.sqrt(5 / 3)  # squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, over n - 1
    half = T_975_DF3 * std / 2
    assert s["mean"] == 2.5
    assert s["n"] == 4
    assert s["std"] == pytest.approx(std, rel=1e-12)
    assert (s["low"], s["high"]) == pytest.approx((2.5 - half, 2.5 + half), rel=1e-12)


def test_t_interval_drops_nan_and_is_nan_below_two_values():
    assert t_interval([1.0, math.nan, 3.0])["n"] == 2
    one = t_interval([5.0])
    assert one["mean"] == 5.0 and math.isnan(one["std"]) and math.isnan(one["low"])
    assert t_interval([])["n"] == 0


def _runs() -> pd.DataFrame:
    """Two points × two policies × three replications; ``b`` lacks replication 2 at point 1."""
    rows = []
    overhead = {
        (0, "a"): [0.10, 0.20, 0.30],
        (0, "b"): [0.15, 0.20, 0.40],
        (1, "a"): [0.05, 0.07, 0.09],
        (1, "b"): [0.04, 0.09],
    }
    for (point, policy), values in overhead.items():
        for rep, value in enumerate(values):
            rows.append(
                {
                    "point": point,
                    "interval": ["1 h", "2 h"][point],
                    "policy": policy,
                    "kind": "full",
                    "rep": rep,
                    "seed": 1,
                    "overhead_frac": value,
                    "wall_h": 10 * (1 + value),
                    "interval_h": point + 1.0,
                }
            )
    return pd.DataFrame(rows)


def test_summary_means_intervals_and_paired_differences_by_hand():
    summary = summarize(_runs(), ["interval"], reference="a")
    assert list(summary["policy"]) == ["a", "b", "a", "b"]
    assert list(summary["interval"]) == ["1 h", "1 h", "2 h", "2 h"]
    assert list(summary["n"]) == [3, 3, 3, 2]

    b0 = summary.iloc[1]
    mean = (0.15 + 0.20 + 0.40) / 3
    std = np.std([0.15, 0.20, 0.40], ddof=1)
    assert b0["overhead_frac_mean"] == pytest.approx(mean)
    assert b0["overhead_frac_std"] == pytest.approx(std)
    assert b0["overhead_frac_ci95_half"] == pytest.approx(T_975_DF2 * std / math.sqrt(3))
    assert b0["wall_h_mean"] == pytest.approx(10 * (1 + mean))
    assert b0["interval_h_mean"] == 1.0
    # paired: differences 0.05, 0.00, 0.10 -> mean 0.05, std 0.05
    assert b0["reference"] == "a"
    assert b0["overhead_frac_diff_mean"] == pytest.approx(0.05)
    assert b0["overhead_frac_diff_n"] == 3
    half = T_975_DF2 * 0.05 / math.sqrt(3)
    assert b0["overhead_frac_diff_ci95_low"] == pytest.approx(0.05 - half)
    assert b0["overhead_frac_diff_ci95_high"] == pytest.approx(0.05 + half)

    # point 1: only replications 0 and 1 are matched: differences -0.01, +0.02
    b1 = summary.iloc[3]
    assert b1["overhead_frac_diff_n"] == 2
    assert b1["overhead_frac_diff_mean"] == pytest.approx(0.005)
    half = scipy_stats.t.ppf(0.975, 1) * np.std([-0.01, 0.02], ddof=1) / math.sqrt(2)
    assert b1["overhead_frac_diff_ci95_high"] == pytest.approx(0.005 + half)

    a0 = summary.iloc[0]
    assert a0["overhead_frac_diff_mean"] == 0.0
    assert a0["overhead_frac_diff_ci95_low"] == a0["overhead_frac_diff_ci95_high"] == 0.0


def test_reference_defaults_to_the_first_policy_and_plain_runs_get_point_zero():
    runs = _runs().drop(columns=["point", "interval"])
    runs = runs[runs["interval_h"] == 1.0]
    summary = summarize(runs)
    assert list(summary["point"]) == [0, 0]
    assert set(summary["reference"]) == {"a"}
    assert "logloss_delta_mean" not in summary


def test_accuracy_columns_are_summarised_and_paired_when_present():
    runs = _runs().assign(logloss_delta=lambda d: d["overhead_frac"] / 10)
    summary = summarize(runs, ["interval"], reference="a")
    assert summary.iloc[1]["logloss_delta_mean"] == pytest.approx((0.15 + 0.20 + 0.40) / 30)
    assert summary.iloc[1]["logloss_delta_diff_mean"] == pytest.approx(0.005)


def test_paired_differences_align_on_replication():
    runs = _runs()
    a = runs[(runs.point == 1) & (runs.policy == "a")]
    b = runs[(runs.point == 1) & (runs.policy == "b")].iloc[::-1]
    assert paired_differences(b, a, "overhead_frac") == pytest.approx([-0.01, 0.02])


def test_sweep_table_lists_every_row():
    text = sweep_table(summarize(_runs(), ["interval"]), ["interval"])
    assert len(text.splitlines()) == 5
    assert "Δ vs ref" in text.splitlines()[0]


def test_summary_records_equal_pandas_on_the_parquet_table(tmp_path):
    """The summary is computed without pandas from runs.csv as pyarrow reads it: its means
    of other columns equal pandas' ``Series.mean()`` of runs.parquet bit for bit (pairwise
    summation, NaN skipped), and its records those of a DataFrame of the rows (a column of
    integers with a gap holds floats; a missing value is NaN)."""
    import numpy as np
    import pandas as pd

    from ftsim.experiments.output import csv_and_parquet
    from ftsim.experiments.stats import arrow_columns, summary_records

    rng = np.random.default_rng(7)
    rows = []
    for point in (0, 1):
        for policy in ("full", "cpr"):
            for rep in range(40):
                rows.append(
                    {
                        "point": point,
                        "x": ["1 h", "2 h"][point],
                        "policy": policy,
                        "kind": policy,
                        "rep": rep,
                        "completed": rep != 3,
                        "overhead_frac": float(rng.random()) if rep != 3 else math.inf,
                        "n_failures": int(rng.integers(0, 9)),
                        "interval_h": float(rng.random() * 1e3),
                        "gappy": float(rng.random()) if rep % 5 else math.nan,
                        "cpr_decision": "partial" if policy == "cpr" else "",
                    }
                )
    with csv_and_parquet(tmp_path / "runs", rows) as table:
        records = summary_records(arrow_columns(table), ["x"], "full")
    frame = pd.read_parquet(tmp_path / "runs.parquet")
    done = frame[frame["completed"]]
    for record in records:
        group = done[(done["point"] == record["point"]) & (done["policy"] == record["policy"])]
        for column in ("interval_h", "gappy"):
            assert record[f"{column}_mean"] == float(group[column].mean())
        assert record["n"] == 39 and record["n_unfinished"] == 1
    decisions = frame.groupby(["point", "policy"], sort=False)["cpr_decision"].first()
    assert [r["cpr_decision"] for r in records] == list(decisions)
    raw = [{"a": 1, "b": 2}, {"a": 2.5}, {"a": 3, "c": "s"}]
    from ftsim.experiments.stats import _frame_records

    expected = pd.DataFrame(raw).to_dict("records")
    got = _frame_records(raw)
    assert [list(map(type, r.values())) for r in got] == [
        list(map(type, r.values())) for r in expected
    ]
    assert repr(got) == repr(expected)
