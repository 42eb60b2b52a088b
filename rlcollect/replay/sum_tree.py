"""A sum tree (and min tree) over float64 leaves, vectorised with numpy: the prioritized sampler's index.

The leaves are padded to a power of two ``size``; node ``i`` (``1 <= i < size``) holds the sum (and
the minimum) of its children ``2i`` and ``2i + 1``, and leaf ``j`` lives at node ``size + j``. Setting
``k`` leaves recomputes their ancestors level by level (``log2(size)`` vectorised steps); finding the
leaves where ``k`` prefix sums fall walks down the tree, all ``k`` queries together. Unset leaves hold
0 in the sum tree and +inf in the min tree.

Examples:
    >>> import numpy as np
    >>> tree = SumTree(5)
    >>> tree.set(np.array([0, 1, 4]), np.array([1.0, 2.0, 3.0]))
    >>> tree.total, tree.min
    (6.0, 1.0)
    >>> tree.find(np.array([0.5, 1.0, 2.9, 3.0, 5.99]))  # cumulative sums: 1, 3, 3, 3, 6
    array([0, 1, 1, 4, 4])
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["SumTree"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class SumTree:
    """Sums and minima of ``capacity`` non-negative leaves, with vectorised updates and prefix search."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._size = 1 << max(0, (capacity - 1).bit_length())
        self._depth = self._size.bit_length() - 1
        self._sum: FloatArray = np.zeros(2 * self._size)
        self._min: FloatArray = np.full(2 * self._size, np.inf)

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """Smallest set leaf (+inf if none is set)."""
        return float(self._min[1])

    def __getitem__(self, leaves: IntArray) -> FloatArray:
        values: FloatArray = self._sum[self._size + leaves]  # numpy's hints: Any on Python 3.10
        return values

    def values(self) -> FloatArray:
        """A copy of all ``capacity`` leaves (0 where unset)."""
        values: FloatArray = self._sum[self._size : self._size + self.capacity].copy()
        return values

    def set(self, leaves: IntArray, values: FloatArray) -> None:
        """Set ``leaves`` to ``values`` (with repeated leaves, which value wins is unspecified)."""
        nodes = self._size + np.asarray(leaves, dtype=np.int64)
        if nodes.size == 0:
            return
        self._sum[nodes] = values
        self._min[nodes] = values
        for _ in range(self._depth):  # parents from children, level by level (repeats are harmless)
            nodes >>= 1
            left = nodes << 1
            right = left + 1
            self._sum[nodes] = self._sum[left] + self._sum[right]
            self._min[nodes] = np.minimum(self._min[left], self._min[right])

    def find(self, mass: FloatArray) -> IntArray:
        """For each ``m`` in ``mass``: the first leaf ``j`` with ``sum(leaves[: j + 1]) > m``.

        ``m`` is drawn in ``[0, total)``; rounding can make the walk end on a zero leaf, which the
        caller rejects.
        """
        mass = np.array(mass, dtype=np.float64)
        node = np.ones(len(mass), dtype=np.int64)
        for _ in range(self._depth):
            node <<= 1
            left = self._sum[node]
            right = mass >= left
            np.subtract(mass, left, out=mass, where=right)
            node += right
        return node - self._size
