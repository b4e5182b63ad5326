# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

import math

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import pytest

from composable.conductor.elastic import predictor


def _ar_series(intercept, coefficients, size, seed=0, noise=1.0):
    rng = np.random.default_rng(seed)
    order = len(coefficients)
    series = np.zeros(size + 200)
    for t in range(order, series.size):
        lags = series[t - order:t][::-1]
        series[t] = (intercept + float(np.dot(coefficients, lags))
                     + rng.normal(0.0, noise))
    return series[200:]  # past the start-up transient


def test_fit_recovers_ar2_coefficients():
    series = _ar_series(10.0, (0.5, 0.3), 4000)
    fit = predictor.fit_autoregressive(series, 2)
    assert fit.coefficients == pytest.approx((0.5, 0.3), abs=0.04)
    # The process mean is 10 / (1 - 0.8) = 50; the intercept follows.
    assert fit.intercept / (1 - sum(fit.coefficients)) == pytest.approx(
        50.0, rel=0.02)


def test_fit_equals_ordinary_least_squares_by_normal_equations():
    series = _ar_series(5.0, (0.6, -0.2, 0.1), 300, seed=3)
    fit = predictor.fit_autoregressive(series, 3)
    # The same estimate, computed the plain way: rows (1, M(t), M(t-1),
    # M(t-2)) against M(t+1).
    rows = [(1.0, series[t], series[t - 1], series[t - 2])
            for t in range(2, series.size - 1)]
    design = np.array(rows)
    target = series[3:]
    expected = np.linalg.solve(design.T @ design, design.T @ target)
    assert fit.intercept == pytest.approx(expected[0], rel=1e-6)
    assert fit.coefficients == pytest.approx(tuple(expected[1:]), rel=1e-6)


def test_forecast_iterates_one_step_predictions():
    fit = predictor.ARFit(intercept=1.0, coefficients=(0.5, 0.25))
    out = fit.forecast([8.0, 4.0], 3)
    # 1 + .5*4 + .25*8 = 5; 1 + .5*5 + .25*4 = 4.5; 1 + .5*4.5 + .25*5
    assert list(out) == pytest.approx([5.0, 4.5, 4.5])


def test_predicts_a_linear_ramp():
    ramp = 100.0 + 10.0 * np.arange(40)   # last sample 490
    model = predictor.Predictor(order=3, observation=30, horizon=5,
                                headroom=0.1, quantum=64)
    prediction = model.predict(ramp)
    assert prediction.forecast == pytest.approx(
        (500.0, 510.0, 520.0, 530.0, 540.0), abs=1e-6)
    assert prediction.peak == pytest.approx(540.0)
    # 540 * 1.1 = 594 -> 10 quanta of 64 = 640.
    assert prediction.provision == 640
    assert prediction.order == 3


def test_falling_ramp_peak_is_the_newest_sample():
    fall = 1000.0 - 10.0 * np.arange(40)
    prediction = predictor.Predictor(order=2, observation=40,
                                     horizon=4).predict(fall)
    assert prediction.forecast[0] == pytest.approx(600.0)
    assert prediction.peak == pytest.approx(610.0)


def test_constant_series_is_carried_forward():
    prediction = predictor.Predictor(order=4, observation=20, horizon=3,
                                     quantum=100).predict([250.0] * 20)
    assert prediction.forecast == (250.0, 250.0, 250.0)
    assert prediction.order == 0
    assert prediction.provision == 300


def test_short_history_lowers_the_order():
    model = predictor.Predictor(order=4, observation=50, horizon=2)
    assert model.predict([5.0]).order == 0
    assert model.predict([5.0]).peak == 5.0
    assert model.predict([1.0, 2.0, 3.0, 4.0, 5.0]).order == 2
    assert model.predict([1.0, 2.0, 3.0, 4.0, 5.0]).peak == pytest.approx(
        7.0)


def test_only_the_observation_window_is_fitted():
    # Ages of noise, then a clean ramp: a window of the ramp alone
    # predicts it exactly.
    rng = np.random.default_rng(1)
    series = np.concatenate([rng.uniform(0, 1000, 200),
                             10.0 * np.arange(30)])
    prediction = predictor.Predictor(order=2, observation=30,
                                     horizon=2).predict(series)
    assert prediction.forecast == pytest.approx((300.0, 310.0))


def test_lost_samples_are_interpolated():
    series = [float('nan'), 10.0, 20.0, float('nan'), 40.0, 50.0,
              float('inf'), 70.0, float('nan')]
    cleaned = predictor.clean_history(series)
    assert list(cleaned) == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0,
                             70.0]


def test_history_without_finite_sample_is_refused():
    model = predictor.Predictor(order=2, observation=10, horizon=1)
    with pytest.raises(predictor.NotEnoughHistory, match='no finite'):
        model.predict([float('nan')] * 5)
    with pytest.raises(predictor.NotEnoughHistory):
        model.predict([])


def test_a_runaway_fit_is_bounded_by_the_recent_rise():
    # A flat line that jumps at the end fits an explosive model.
    series = np.array([100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0,
                       101.0, 99.0, 100.0, 160.0])
    fit = predictor.fit_autoregressive(series, 2)
    assert abs(fit.forecast(series, 10)).max() > 1000  # it would run away
    prediction = predictor.Predictor(order=2, observation=11,
                                     horizon=10).predict(series)
    assert prediction.peak <= 160.0 + 10 * 60.0 + 1e-9
    assert min(prediction.forecast) >= 0.0


@pytest.mark.parametrize('kwargs, message', [
    (dict(order=0), 'order must be between 1'),
    (dict(order=2.5), 'order must be a whole number'),
    (dict(order=True), 'order must be a whole number'),
    (dict(observation=1), 'observation window must be between 2'),
    (dict(horizon=0), 'prediction window must be between 1'),
    (dict(horizon=predictor.MAX_WINDOW + 1), 'prediction window'),
    (dict(headroom=-0.1), 'headroom must be between 0'),
    (dict(headroom=float('nan')), 'headroom'),
    (dict(headroom='lots'), 'headroom must be a number'),
    (dict(quantum=0), 'quantum'),
    (dict(floor=-1), 'floor'),
    (dict(floor=10, ceiling=5), 'ceiling 5 is below floor 10'),
])
def test_bad_parameters_are_refused(kwargs, message):
    args = dict(order=2, observation=10, horizon=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        predictor.Predictor(**args)


def test_fit_refuses_too_short_or_non_finite_series():
    with pytest.raises(ValueError, match='at least 5 samples'):
        predictor.fit_autoregressive([1.0, 2.0, 3.0, 4.0], 2)
    with pytest.raises(ValueError, match='finite'):
        predictor.fit_autoregressive([1.0, 2.0, float('nan'), 4.0, 5.0], 1)


def test_provision_respects_quantum_floor_and_ceiling():
    model = predictor.Predictor(order=1, observation=4, horizon=1,
                                quantum=1024, floor=2048, ceiling=5000)
    assert model.provision_for(0.0) == 2048
    assert model.provision_for(1024.0000000001) == 2048
    assert model.provision_for(3000.0) == 3072
    assert model.provision_for(9000.0) == 4096


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1,
                max_size=60),
       st.integers(min_value=1, max_value=6),
       st.integers(min_value=1, max_value=12),
       st.floats(min_value=0, max_value=1))
def test_provision_covers_the_peak_in_whole_quanta(series, order, horizon,
                                                   headroom):
    model = predictor.Predictor(order=order, observation=40,
                                horizon=horizon, headroom=headroom,
                                quantum=256)
    prediction = model.predict(series)
    assert len(prediction.forecast) == horizon
    assert all(math.isfinite(v) and v >= 0 for v in prediction.forecast)
    assert prediction.peak >= series[-1]
    assert prediction.provision % 256 == 0
    assert prediction.provision >= prediction.peak * (1 + headroom) - 1e-6
