"""Named, strided shapes: ``Extent`` (sizes), ``Point`` (a coordinate), ``Shape`` (a view).

A ``Shape`` maps the points of a named extent to ranks of an underlying flat list via
``offset + sum(index * stride)``: slicing a mesh only builds a new ``Shape`` over the
same actors, so sliced meshes address the right underlying ranks. Ranks enumerate in
row-major order (the last label varies fastest).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["Extent", "MeshTrait", "Point", "Shape"]


class Extent:
    """Ordered named sizes, e.g. ``Extent(["hosts", "gpus"], [2, 4])``."""

    __slots__ = ("labels", "sizes")

    def __init__(self, labels: Sequence[str], sizes: Sequence[int]) -> None:
        if len(labels) != len(sizes):
            raise ValueError(f"extent needs one size per label, got labels={list(labels)} sizes={list(sizes)}")
        if len(set(labels)) != len(labels):
            raise ValueError(f"extent labels must be distinct, got {list(labels)}")
        for label, size in zip(labels, sizes):
            if not isinstance(label, str) or not label.isidentifier():
                raise ValueError(f"extent label {label!r} must be an identifier string")
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"size of {label!r} must be a positive integer, got {size!r}")
        self.labels: tuple[str, ...] = tuple(labels)
        self.sizes: tuple[int, ...] = tuple(sizes)

    @classmethod
    def from_dict(cls, sizes: Mapping[str, int]) -> Extent:
        return cls(list(sizes), list(sizes.values()))

    @property
    def nelements(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def __len__(self) -> int:
        return self.nelements

    def keys(self) -> tuple[str, ...]:
        return self.labels

    def __getitem__(self, label: str) -> int:
        try:
            return self.sizes[self.labels.index(label)]
        except ValueError:
            raise KeyError(label) from None

    def to_dict(self) -> dict[str, int]:
        return dict(zip(self.labels, self.sizes))

    def point(self, rank: int) -> Point:
        return Point(rank, self)

    def points(self) -> Iterator[Point]:
        for r in range(self.nelements):
            yield Point(r, self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Extent) and (self.labels, self.sizes) == (other.labels, other.sizes)

    def __hash__(self) -> int:
        return hash((self.labels, self.sizes))

    def __repr__(self) -> str:
        return "{" + ", ".join(f"'{k}': {v}" for k, v in zip(self.labels, self.sizes)) + "}"

    def __reduce__(self):
        return (Extent, (self.labels, self.sizes))


class Point(Mapping[str, int]):
    """A coordinate in an extent: read-only mapping label -> index, plus ``rank``."""

    __slots__ = ("rank", "extent", "_coords")

    def __init__(self, rank: int, extent: Extent) -> None:
        if not 0 <= rank < max(extent.nelements, 1):
            raise IndexError(f"rank {rank} out of range for extent {extent!r}")
        self.rank = rank
        self.extent = extent
        coords = []
        for size in reversed(extent.sizes):
            coords.append(rank % size)
            rank //= size
        self._coords = tuple(reversed(coords))

    def __getitem__(self, label: str) -> int:
        try:
            return self._coords[self.extent.labels.index(label)]
        except ValueError:
            raise KeyError(label) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.extent.labels)

    def __len__(self) -> int:
        return len(self.extent.labels)

    def __str__(self) -> str:
        return "{" + ", ".join(
            f"'{k}': {c}/{s}" for k, c, s in zip(self.extent.labels, self._coords, self.extent.sizes)
        ) + "}"

    def __repr__(self) -> str:
        return f"Point({self.rank}, {self.extent!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Point):
            return self.rank == other.rank and self.extent == other.extent
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash((self.rank, self.extent))

    def __reduce__(self):
        return (Point, (self.rank, self.extent))


class Shape:
    """A named strided view ``labels``/``sizes``/``strides`` + ``offset`` over flat ranks."""

    __slots__ = ("extent", "offset", "strides")

    def __init__(self, extent: Extent, offset: int = 0, strides: Sequence[int] | None = None) -> None:
        self.extent = extent
        self.offset = offset
        if strides is None:
            strides, acc = [], 1
            for size in reversed(extent.sizes):
                strides.append(acc)
                acc *= size
            strides.reverse()
        self.strides: tuple[int, ...] = tuple(strides)

    @classmethod
    def dense(cls, sizes: Mapping[str, int]) -> Shape:
        return cls(Extent.from_dict(sizes))

    @property
    def labels(self) -> tuple[str, ...]:
        return self.extent.labels

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.extent.sizes

    def __len__(self) -> int:
        return self.extent.nelements

    def ranks(self) -> list[int]:
        """Underlying ranks of every point, in row-major order."""
        out = []
        for idx in itertools.product(*(range(s) for s in self.extent.sizes)):
            out.append(self.offset + sum(i * st for i, st in zip(idx, self.strides)))
        return out

    def rank_of(self, point_rank: int) -> int:
        p = Point(point_rank, self.extent)
        return self.offset + sum(c * st for c, st in zip(p._coords, self.strides))

    def slice(self, **kw: int | slice) -> Shape:
        """Select (int: drop the dimension) or restrict (slice: keep it) dimensions.

        Raises:
            TypeError: a label that the shape lacks, or an index that is not an int/slice.
            IndexError: an index out of range, or a slice that selects nothing.
        """
        labels, sizes, strides = list(self.labels), list(self.sizes), list(self.strides)
        offset = self.offset
        for label, sel in kw.items():
            if label not in labels:
                raise TypeError(f"mesh has no dimension {label!r}; its dimensions are {list(self.labels)}")
            i = labels.index(label)
            size, stride = sizes[i], strides[i]
            if isinstance(sel, bool) or not isinstance(sel, (int, slice)):
                raise TypeError(f"{label}= takes an int or a slice, got {type(sel).__name__}")
            if isinstance(sel, int):
                if not -size <= sel < size:
                    raise IndexError(f"{label}={sel} out of range: dimension {label!r} has size {size}")
                offset += (sel % size) * stride
                del labels[i], sizes[i], strides[i]
            else:
                start, stop, step = sel.indices(size)
                if step < 1:
                    raise IndexError(f"{label}: only positive slice steps are supported, got {step}")
                n = len(range(start, stop, step))
                if n == 0:
                    raise IndexError(f"{label}={sel!r} selects nothing from dimension of size {size}")
                offset += start * stride
                sizes[i], strides[i] = n, stride * step
        return Shape(Extent(labels, sizes), offset, strides)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and (self.extent, self.offset, self.strides) == (
            other.extent,
            other.offset,
            other.strides,
        )

    def __hash__(self) -> int:
        return hash((self.extent, self.offset, self.strides))

    def __repr__(self) -> str:
        return f"Shape({self.extent!r}, offset={self.offset}, strides={self.strides})"

    def __reduce__(self):
        return (Shape, (self.extent, self.offset, self.strides))


class MeshTrait:
    """Shape queries and slicing shared by HostMesh, ProcMesh, ActorMesh and ValueMesh.

    Subclasses provide ``_shape`` and ``_new_with_shape(shape)``.
    """

    _shape: Shape

    def _new_with_shape(self, shape: Shape) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def extent(self) -> Extent:
        return self._shape.extent

    @property
    def sizes(self) -> dict[str, int]:
        return self._shape.extent.to_dict()

    def size(self, dim: str | Sequence[str] | None = None) -> int:
        """Number of ranks (in ``dim`` or the product over ``dims``; all when None).

        Raises:
            KeyError: a dimension the mesh lacks.
        """
        if dim is None:
            return len(self._shape)
        dims = [dim] if isinstance(dim, str) else list(dim)
        n = 1
        for d in dims:
            if d not in self._shape.labels:
                raise KeyError(f"mesh has no dimension {d!r}; its dimensions are {list(self._shape.labels)}")
            n *= self._shape.extent[d]
        return n

    def __len__(self) -> int:
        return len(self._shape)

    def slice(self, **kw: int | slice) -> Any:
        """A view of some ranks: ``mesh.slice(hosts=0, gpus=slice(0, 2))``.

        Raises:
            TypeError: unknown dimension label. IndexError: index out of range.
        """
        return self._new_with_shape(self._shape.slice(**kw))
