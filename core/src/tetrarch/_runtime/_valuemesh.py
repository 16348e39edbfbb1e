"""``ValueMesh``: one value per rank of the mesh a ``call`` went to."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

from ._shape import Extent, MeshTrait, Point, Shape

__all__ = ["ValueMesh"]

R = TypeVar("R")


class ValueMesh(MeshTrait, Generic[R]):
    """Values laid out like a mesh: ``items()``, ``values()``, ``item(**coords)``, slicing."""

    def __init__(self, shape: Shape | Extent, values: Sequence[R]) -> None:
        if isinstance(shape, Extent):
            shape = Shape(shape)
        self._shape = shape
        self._values = list(values)
        if shape.offset == 0 and len(self._values) == len(shape) and shape == Shape(shape.extent):
            self._dense = True
        else:
            self._dense = False
            if not self._values or max(shape.ranks()) >= len(self._values):
                raise ValueError(f"ValueMesh of shape {shape!r} needs a value per rank, got {len(self._values)}")

    def _new_with_shape(self, shape: Shape) -> ValueMesh[R]:
        return ValueMesh(shape, self._values)

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
        """The value at local rank ``rank`` (row-major index in this view)."""
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
            raise KeyError(f"item() needs exactly the coordinates {list(labels)}; missing {missing}, unknown {extra}")
        rank = 0
        for lab, size in zip(labels, self._shape.sizes):
            c = coords[lab]
            if not 0 <= c < size:
                raise IndexError(f"{lab}={c} out of range: dimension {lab!r} has size {size}")
            rank = rank * size + c
        return self.get(rank)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ValueMesh) and self.extent == other.extent and self.values() == other.values()

    def __repr__(self) -> str:
        body = ", ".join(f"{str(p)}: {v!r}" for p, v in self.items())
        return f"ValueMesh({self.extent!r}: {body})"

    def __reduce__(self):
        return (ValueMesh, (self._shape.extent, self.values()))
