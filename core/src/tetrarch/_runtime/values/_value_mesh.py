"""``ValueMesh``: one value per rank of the mesh a ``call`` went to."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from ..._errors import ArgumentError, MeshIndexError, MeshKeyError
from ._shape import Extent, MeshTrait, Point, Shape

__all__ = ["ValueMesh"]

R = TypeVar("R")


class ValueMesh(MeshTrait, Generic[R]):
    """Values laid out like a mesh: ``items()``, ``values()``, ``item(**coords)``, slicing.

    ``_values`` is the full underlying list; ``_shape`` says which of its entries this view
    holds, so slicing, splitting, renaming and flattening never copy values.
    """

    def __init__(self, shape: Shape | Extent, values: Sequence[R]) -> None:
        """``ValueMesh(extent, values)``: one value per point, in rank order.

        ``ValueMesh(shape, values)``: ``values`` is the underlying list the (possibly
        sliced or strided) ``shape`` indexes into.

        Raises:
            ValueError: with an ``Extent``, ``len(values)`` differs from its number of
                points; with a ``Shape``, the shape addresses a rank past the end of
                ``values``.
        """
        self._values = list(values)
        if isinstance(shape, Extent):
            if len(self._values) != shape.nelements:
                raise ArgumentError(
                    f"ValueMesh of extent {shape!r} needs {shape.nelements} values, got {len(self._values)}"
                )
            shape = Shape(shape)
        self._set_shape(shape)

    def _set_shape(self, shape: Shape) -> None:
        if shape.max_rank >= len(self._values):
            raise ArgumentError(f"ValueMesh of shape {shape!r} needs a value per rank, got {len(self._values)}")
        self._shape = shape
        # Dense: the view is exactly the whole list, so rank i is _values[i].
        self._dense = len(self._values) == len(shape) and shape.is_dense()

    def _new_with_shape(self, shape: Shape) -> ValueMesh[R]:
        # Views share the underlying list (never mutated) instead of copying it.
        view: ValueMesh[R] = ValueMesh.__new__(ValueMesh)
        view._values = self._values
        view._set_shape(shape)
        return view

    def _ranks(self) -> list[int]:
        return list(range(len(self._values))) if self._dense else self._shape.ranks()

    def values(self) -> list[R]:
        """The values in rank order."""
        return [self._values[r] for r in self._ranks()]

    def items(self) -> Iterator[tuple[Point, R]]:
        """``(Point, value)`` pairs in rank order."""
        extent = self._shape.extent
        for i, r in enumerate(self._ranks()):
            yield Point(i, extent), self._values[r]

    __iter__ = items

    def get(self, rank: int) -> R:
        """The value at local rank ``rank`` (row-major index in this view).

        Raises:
            IndexError: ``rank`` is not in ``0 .. len(self) - 1``.
        """
        if self._dense:
            if not 0 <= rank < len(self._values):
                raise MeshIndexError(f"rank {rank} out of range for extent {self.extent!r}")
            return self._values[rank]
        return self._values[self._shape.rank_of(rank)]

    def item(self, **coords: int) -> R:
        """The value at the given coordinates; with no dimension left, ``item()``.

        Raises:
            KeyError: coordinates missing or naming a dimension the mesh lacks.
            IndexError: a coordinate out of range.
        """
        labels = self._shape.labels
        if set(coords) != set(labels):
            missing = [lab for lab in labels if lab not in coords]
            extra = [lab for lab in coords if lab not in labels]
            raise MeshKeyError(f"item() needs exactly the coordinates {list(labels)}; missing {missing}, "
                               f"unknown {extra}")
        rank = 0
        for lab, size in zip(labels, self._shape.sizes, strict=True):
            c = coords[lab]
            if not 0 <= c < size:
                raise MeshIndexError(f"{lab}={c} out of range: dimension {lab!r} has size {size}")
            rank = rank * size + c
        return self.get(rank)

    def __eq__(self, other: object) -> bool:
        """Equal when extents and the values in rank order are equal (layout is ignored)."""
        return isinstance(other, ValueMesh) and self.extent == other.extent and self.values() == other.values()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        body = "".join(f"  ({p}, {v!r}),\n" for p, v in self.items())
        return f"ValueMesh({self.extent!r}):\n(\n{body})"

    def __reduce__(self):
        # Compact on the way out: only this view's values travel, in rank order.
        return (ValueMesh, (self._shape.extent, self.values()))
