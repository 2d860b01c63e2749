"""lab.views.smoothing.ema_debiased against a line-by-line port of TensorBoard's JavaScript."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.views.smoothing import ema_debiased


def tensorboard_reference(data: list[float], weight: float) -> list[float]:
    """vz_line_chart2 line-chart.ts ``resmoothDataset``, transcribed statement by statement."""
    last = 0.0 if len(data) > 0 else math.nan
    num_accum = 0
    is_constant = all(v == data[0] for v in data)
    out = []
    for next_val in data:
        if is_constant or not math.isfinite(next_val):
            out.append(next_val)
        else:
            last = last * weight + (1 - weight) * next_val
            num_accum += 1
            debias_weight = 1.0
            if weight != 1:
                debias_weight = 1 - math.pow(weight, num_accum)
            out.append(last / debias_weight)
    return out


@pytest.mark.parametrize("weight", [0.0, 0.1, 0.6, 0.9, 0.99, 0.999, 1.0])
def test_equals_tensorboard_bit_for_bit(weight):
    rng = np.random.default_rng(1)
    v = rng.normal(size=20_000) * 3 + np.linspace(5, 0, 20_000)
    v[[0, 7, 500, 19_999]] = [np.nan, np.inf, -np.inf, np.nan]
    got = ema_debiased(v, weight)
    want = np.array(tensorboard_reference(v.tolist(), weight))
    assert np.array_equal(got, want, equal_nan=True)


def test_weight_zero_is_identity_and_constant_passes_through():
    v = np.array([3.0, 1.0, 2.0])
    assert ema_debiased(v, 0.0).tolist() == [3.0, 1.0, 2.0]
    assert ema_debiased([5.0] * 4, 0.9).tolist() == [5.0] * 4
    assert ema_debiased([], 0.5).tolist() == []
    # the first smoothed point is the first value (debiased), not pulled toward 0
    assert ema_debiased([4.0, 0.0], 0.9)[0] == pytest.approx(4.0, rel=1e-15)


def test_non_finite_points_do_not_advance_the_average():
    got = ema_debiased([1.0, np.nan, 3.0], 0.5)
    assert got[0] == 1.0 and np.isnan(got[1])
    assert got[2] == (0.5 * 0.5 + 0.5 * 3.0) / (1 - 0.25)  # two finite points so far


def test_bad_weight_is_a_clear_error():
    with pytest.raises(ValueError, match="between 0 and 1"):
        ema_debiased([1.0, 2.0], 1.5)
