"""Piecewise-linear curves of measured operator times, one axis or two (a family of curves, one per
measured first-axis value, each in context length): the interpolation engines.perf.measured prices
batches with."""
from __future__ import annotations

import numpy as np

_KEY_STRIDE = float(2**36)  # > any context length; curve index * stride + x stays exact in float64


# ------------------------------------------------------------------ interpolation
class Curve:
    """Piecewise-linear y(x) through measured points, extended linearly along the outermost
    segments; vectorized. A single point gives a constant."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        order = np.argsort(x, kind="stable")
        self.x, self.y = x[order], y[order]
        if self.x.size == 0 or np.any(np.diff(self.x) <= 0):
            raise ValueError("Curve needs distinct x values")
        if self.x.size > 1:
            self._slope = np.diff(self.y) / np.diff(self.x)
        else:
            self._slope = np.zeros(1)

    def __call__(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        if self.x.size == 1:
            return np.full(q.shape, self.y[0])
        i = np.searchsorted(self.x, q, side="right") - 1
        i.clip(0, self.x.size - 2, out=i)
        return self.y[i] + (q - self.x[i]) * self._slope[i]


class CurveFamily:
    """z(u, x): one piecewise-linear curve in x (context length) per measured u (chunk size or
    decode batch size); a query interpolates linearly in u between the curves of the two nearest
    u knots, each evaluated at x. Both axes extend linearly beyond the measured range. The curves
    are concatenated into one sorted key array (curve index x stride + x) so any number of
    queries is answered with one searchsorted."""

    def __init__(self, u: np.ndarray, x: np.ndarray, z: np.ndarray) -> None:
        u = np.asarray(u, dtype=np.float64)
        x = np.asarray(x, dtype=np.float64)
        z = np.asarray(z, dtype=np.float64)
        order = np.lexsort((x, u))
        u, x, z = u[order], x[order], z[order]
        if u.size == 0:
            raise ValueError("CurveFamily needs points")
        if np.any((np.diff(u) == 0) & (np.diff(x) <= 0)):
            raise ValueError("CurveFamily needs distinct (u, x) points")
        if x.min() < 0 or x.max() >= _KEY_STRIDE:
            raise ValueError("context lengths out of range")
        self.u, starts = np.unique(u, return_index=True)
        ends = np.append(starts[1:], u.size)
        self.x, self.z = x, z
        curve = np.repeat(np.arange(self.u.size), ends - starts)
        self._keys = curve * _KEY_STRIDE + x
        self._start = starts
        self._last_left = np.maximum(ends - 2, starts)  # left knot of the curve's last segment
        self._end = ends - 1  # last knot
        if self.u.size > 1:
            self._du = np.diff(self.u)
        # Fast path for complete rectilinear grids (every curve measured at the same contexts):
        # one search per axis, then bilinear interpolation on the (J, K) table.
        counts = ends - starts
        self._grid = None
        if np.all(counts == counts[0]) and counts[0] > 1:
            xs = x.reshape(self.u.size, counts[0])
            if np.all(xs == xs[0]):
                self._grid = (xs[0].copy(), z.copy(), int(counts[0]))  # z is row-major (u, x)

    def points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The measured knots as (u, x, z) per point, sorted by u then x."""
        return self.u[(self._keys // _KEY_STRIDE).astype(np.int64)], self.x, self.z

    def _bilinear(self, u: np.ndarray, x: np.ndarray) -> np.ndarray:
        xk, flat, width = self._grid
        i = np.searchsorted(xk, x, side="right")
        np.maximum(i, 1, out=i)
        np.minimum(i, xk.size - 1, out=i)
        i -= 1
        x0 = xk.take(i)
        wx = x - x0
        wx /= xk.take(i + 1) - x0
        if self.u.size > 1:
            j = np.searchsorted(self.u, u, side="right")
            np.maximum(j, 1, out=j)
            np.minimum(j, self.u.size - 1, out=j)
            j -= 1
            u0 = self.u.take(j)
            wu = u - u0
            wu /= self.u.take(j + 1) - u0
            i += j * width
        z0 = flat.take(i)
        z0 += wx * (flat.take(i + 1) - z0)
        if self.u.size == 1:
            return z0
        i += width
        z1 = flat.take(i)
        z1 += wx * (flat.take(i + 1) - z1)
        z1 -= z0
        z1 *= wu
        z1 += z0
        return z1

    def _curve_at(self, j: np.ndarray, x: np.ndarray) -> np.ndarray:
        key = j * _KEY_STRIDE + np.clip(x, 0.0, _KEY_STRIDE - 1)
        i = np.searchsorted(self._keys, key, side="right") - 1
        left = np.clip(i, self._start[j], self._last_left[j])
        right = np.minimum(left + 1, self._end[j])
        x0 = self.x[left]
        dx = self.x[right] - x0
        dz = self.z[right] - self.z[left]
        slope = np.divide(dz, dx, out=np.zeros_like(dz), where=dx > 0)
        return self.z[left] + (x - x0) * slope

    def __call__(self, u: np.ndarray, x: np.ndarray) -> np.ndarray:
        u = np.asarray(u, dtype=np.float64)
        x = np.asarray(x, dtype=np.float64)
        if self._grid is not None:
            return self._bilinear(u, x)
        if self.u.size == 1:
            return self._curve_at(np.zeros(u.shape, dtype=np.int64), x)
        j = np.searchsorted(self.u, u, side="right") - 1
        j.clip(0, self.u.size - 2, out=j)
        w = (u - self.u[j]) / self._du[j]
        z0 = self._curve_at(j, x)
        z1 = self._curve_at(j + 1, x)
        return z0 + w * (z1 - z0)


# ------------------------------------------------------------------ profiles
