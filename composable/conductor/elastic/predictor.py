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

"""Autoregressive prediction of a workload's memory peak.

The model is the one of Li et al. (§8)::

    M(t+1) = a + a0·M(t) + a1·M(t-1) + … + a(w-1)·M(t-w+1)

fitted by ordinary least squares (the conditional maximum-likelihood fit
statsmodels' ``AutoReg`` also computes) on the samples of an observation
window, then iterated one step at a time over the prediction window. The
largest of those predictions (and of the last sample: the next window starts
now) plus headroom, rounded up to whole allocation quanta, is what to
provision.

numpy's least squares is used rather than statsmodels: importing
``statsmodels.tsa.ar_model`` costs about 4 s and 120 MiB of resident
memory, which would double the conductor's start-up time and more than
double its memory, and its fit of a 60-sample window is ~30 times slower
(5 ms against 0.2 ms), for the same estimate.

Everything here is pure: no service import, no I/O, so the conductor's
elastic-lease task and the ``composable-plan`` capacity planner share it.
Windows are counted in samples; callers convert from seconds with their
sampling interval.
"""

import dataclasses
import math

import numpy as np

#: Longest observation window, prediction window or order accepted, in
#: samples. A day of samples every 10 s is 8640; anything longer is a
#: mistake in units rather than a window.
MAX_WINDOW = 100000

#: Headroom is a fraction of the predicted peak; ten times the peak is
#: already absurd.
MAX_HEADROOM = 10.0


class NotEnoughHistory(ValueError):
    """The history holds no usable sample to predict from."""


def _check_int(name, value, low, high=MAX_WINDOW):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError('%s must be a whole number of samples, not %r'
                         % (name, value))
    if not low <= value <= high:
        raise ValueError('%s must be between %d and %d samples, not %d'
                         % (name, low, high, value))
    return int(value)


def _check_number(name, value, low, high):
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError('%s must be a number, not %r' % (name, value))
    if not math.isfinite(number) or not low <= number <= high:
        raise ValueError('%s must be between %g and %g, not %r'
                         % (name, low, high, value))
    return number


def clean_history(history):
    """Return ``history`` as a float array with its gaps filled.

    Telemetry loses samples: interior NaNs are interpolated linearly,
    leading ones dropped, trailing ones carried forward from the last
    sample, so the series stays evenly spaced in time. Infinite values are
    treated as gaps. Raises NotEnoughHistory if no finite sample is left.
    """
    series = np.asarray(history, dtype=float).ravel()
    finite = np.isfinite(series)
    if finite.all() and series.size:
        return series
    if not finite.any():
        raise NotEnoughHistory('the usage history holds no finite sample')
    series = series[int(np.argmax(finite)):]
    finite = finite[int(np.argmax(finite)):]
    if not finite.all():
        index = np.arange(series.size)
        series = np.interp(index, index[finite], series[finite])
    return series


@dataclasses.dataclass(frozen=True)
class ARFit:
    """A fitted ``M(t+1) = a + a0·M(t) + … + a(w-1)·M(t-w+1)``."""

    intercept: float
    #: (a0, a1, …): a0 multiplies the newest sample.
    coefficients: tuple

    @property
    def order(self):
        return len(self.coefficients)

    def forecast(self, recent, steps):
        """Iterate the one-step prediction ``steps`` times after
        ``recent`` (at least ``order`` samples, newest last).
        """
        steps = _check_int('steps', steps, 1)
        lags = list(np.asarray(recent, dtype=float)[-self.order:][::-1]) \
            if self.order else []
        if len(lags) < self.order:
            raise ValueError('forecasting an order-%d model needs %d recent '
                             'samples, got %d'
                             % (self.order, self.order, len(lags)))
        coefficients = np.asarray(self.coefficients, dtype=float)
        out = np.empty(steps)
        for step in range(steps):
            value = self.intercept + float(coefficients @ lags) \
                if self.order else self.intercept
            out[step] = value
            if self.order:
                lags = [value] + lags[:-1]
        return out


def fit_autoregressive(series, order):
    """Fit an order-``order`` autoregressive model with intercept.

    ``series`` must be finite and hold at least ``2·order + 1`` samples, so
    the least-squares problem has at least as many equations as unknowns.
    A constant or collinear series (a flat line, a ramp) makes the problem
    singular; the minimum-norm solution is taken, which still reproduces
    the series exactly and so predicts it exactly.
    """
    order = _check_int('order', order, 1)
    y = np.asarray(series, dtype=float).ravel()
    if not np.isfinite(y).all():
        raise ValueError('the series to fit must be finite')
    if y.size < 2 * order + 1:
        raise ValueError('fitting order %d needs at least %d samples, got %d'
                         % (order, 2 * order + 1, y.size))
    # Centre and scale, so the intercept column and the lags are of one
    # size and the rank decision of lstsq is about shape, not units.
    shift = float(y.mean())
    scale = float(np.abs(y - shift).max()) or 1.0
    z = (y - shift) / scale
    rows = z.size - order
    design = np.empty((rows, order + 1))
    design[:, 0] = 1.0
    # Row r holds M(r+order-1), …, M(r): newest lag first.
    design[:, 1:] = np.lib.stride_tricks.sliding_window_view(
        z[:-1], order)[:, ::-1]
    solution = np.linalg.lstsq(design, z[order:], rcond=None)[0]
    coefficients = solution[1:]
    # Undo the centring: z = (M - shift) / scale.
    intercept = (solution[0] * scale
                 + shift * (1.0 - float(coefficients.sum())))
    return ARFit(intercept=float(intercept),
                 coefficients=tuple(float(c) for c in coefficients))


@dataclasses.dataclass(frozen=True)
class Prediction:
    """What the predictor expects over the next prediction window."""

    #: One predicted value per sample of the prediction window.
    forecast: tuple
    #: The largest of the forecast and the newest sample.
    peak: float
    #: peak plus headroom, rounded up to whole quanta, within
    #: [floor, ceiling].
    provision: int
    #: The order actually fitted: lower than asked on a short history;
    #: 0 means nothing was fitted (too short a history, or a constant
    #: one) and the newest sample was carried forward.
    order: int


class Predictor:
    """Predict the peak of a usage series over the next window.

    :param order: w, the number of lagged samples in the model.
    :param observation: how many of the newest samples the fit sees.
    :param horizon: the prediction window, in samples.
    :param headroom: fraction of the predicted peak added on top.
    :param quantum: the allocation unit (an extent, a chunk); the
        provision is a whole number of them.
    :param floor: the provision never goes below this (a lease's min).
    :param ceiling: nor above this (a lease's max), if given.
    """

    def __init__(self, order, observation, horizon, headroom=0.0,
                 quantum=1, floor=0, ceiling=None):
        self.order = _check_int('order', order, 1)
        self.observation = _check_int('observation window', observation, 2)
        self.horizon = _check_int('prediction window', horizon, 1)
        self.headroom = _check_number('headroom', headroom, 0.0,
                                      MAX_HEADROOM)
        self.quantum = _check_int('quantum', quantum, 1, 2 ** 62)
        self.floor = _check_number('floor', floor, 0.0, 2.0 ** 62)
        self.ceiling = None if ceiling is None else _check_number(
            'ceiling', ceiling, 0.0, 2.0 ** 62)
        if self.ceiling is not None and self.ceiling < self.floor:
            raise ValueError('ceiling %g is below floor %g'
                             % (self.ceiling, self.floor))

    def effective_order(self, samples):
        """The order a window of ``samples`` can support."""
        return min(self.order, (samples - 1) // 2)

    def predict(self, history):
        """Predict from ``history`` (oldest first; NaN for lost samples).

        Raises NotEnoughHistory when it holds no finite sample.
        """
        series = clean_history(history)[-self.observation:]
        order = self.effective_order(series.size)
        if order >= 1 and np.ptp(series) > 0:
            model = fit_autoregressive(series, order)
            forecast = model.forecast(series, self.horizon)
            # A window that ends in the first steps of a burst fits an
            # explosive model, whose iterated forecast runs away; one
            # that holds a burst and its fall reverts towards the
            # window's mean long after the burst. Bound it: memory use is
            # never negative, and rises no faster than over the last
            # ``order`` steps.
            recent = np.diff(series[-(order + 1):])
            rise = max(float(recent.max()), 0.0)
            bound = float(series[-1]) + rise * np.arange(
                1, self.horizon + 1)
            forecast = np.where(np.isfinite(forecast), forecast, bound)
            forecast = np.clip(forecast, 0.0, bound)
        else:
            # Constant (nothing to fit) or too short (nothing to fit on):
            # persistence.
            order = 0
            forecast = np.full(self.horizon, series[-1])
        peak = max(float(forecast.max()), float(series[-1]))
        return Prediction(forecast=tuple(float(v) for v in forecast),
                          peak=peak, provision=self.provision_for(peak),
                          order=order)

    def provision_for(self, peak):
        """``peak`` plus headroom in whole quanta, within the bounds."""
        wanted = max(peak, 0.0) * (1.0 + self.headroom)
        # Tolerate float noise: 1024.0000000001 is one quantum, not two.
        quanta = math.ceil(wanted / self.quantum - 1e-9)
        amount = max(quanta, 0) * self.quantum
        if amount < self.floor:
            amount = math.ceil(self.floor / self.quantum) * self.quantum
        if self.ceiling is not None and amount > self.ceiling:
            amount = math.floor(self.ceiling / self.quantum) * self.quantum
        return int(amount)
