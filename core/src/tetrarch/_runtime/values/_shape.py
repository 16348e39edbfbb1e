"""Named, strided shapes: ``Extent`` (sizes), ``Point`` (a coordinate), ``Shape`` (a view).

A ``Shape`` maps the points of a named extent to ranks of an underlying flat list via
``offset + sum(index * stride)``: slicing a mesh only builds a new ``Shape`` over the
same actors, so sliced meshes address the right underlying ranks. Ranks enumerate in
row-major order (the last label varies fastest).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from ..._errors import ArgumentError, ArgumentTypeError, MeshIndexError, MeshKeyError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Extent", "MeshTrait", "Point", "Shape"]


class Extent:
    """Ordered named sizes, e.g. ``Extent(["hosts", "gpus"], [2, 4])``."""

    # _n and _hash: the element count and the hash, kept (every call on a mesh asks for both)
    __slots__ = ("labels", "sizes", "_n", "_hash")

    def __init__(self, labels: Sequence[str], sizes: Sequence[int]) -> None:
        if len(labels) != len(sizes):
            raise ArgumentError(f"extent needs one size per label, got labels={list(labels)} sizes={list(sizes)}")
        if len(set(labels)) != len(labels):
            raise ArgumentError(f"extent labels must be distinct, got {list(labels)}")
        for label, size in zip(labels, sizes, strict=True):
            if not isinstance(label, str) or not label.isidentifier():
                raise ArgumentError(f"extent label {label!r} must be an identifier string")
            if not isinstance(size, int) or size < 1:
                raise ArgumentError(f"size of {label!r} must be a positive integer, got {size!r}")
        self.labels: tuple[str, ...] = tuple(labels)
        self.sizes: tuple[int, ...] = tuple(sizes)
        n = 1
        for size in self.sizes:
            n *= size
        self._n = n
        self._hash: int | None = None

    @classmethod
    def from_dict(cls, sizes: Mapping[str, int]) -> Extent:
        return cls(list(sizes), list(sizes.values()))

    @property
    def nelements(self) -> int:
        return self._n

    def __len__(self) -> int:
        return self._n

    def keys(self) -> tuple[str, ...]:
        return self.labels

    def __getitem__(self, label: str) -> int:
        try:
            return self.sizes[self.labels.index(label)]
        except ValueError:
            raise MeshKeyError(label) from None

    def to_dict(self) -> dict[str, int]:
        return dict(zip(self.labels, self.sizes, strict=True))

    def point(self, rank: int) -> Point:
        return Point(rank, self)

    def points(self) -> Iterator[Point]:
        for r in range(self.nelements):
            yield Point(r, self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Extent) and (self.labels, self.sizes) == (other.labels, other.sizes)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash((self.labels, self.sizes))
        return h

    def __repr__(self) -> str:
        return "{" + ", ".join(f"'{k}': {v}" for k, v in zip(self.labels, self.sizes, strict=True)) + "}"

    def __reduce__(self):
        return (Extent, (self.labels, self.sizes))


class Point(Mapping[str, int]):
    """A coordinate in an extent: read-only mapping label -> index, plus ``rank``."""

    __slots__ = ("rank", "extent", "_coords")

    def __init__(self, rank: int, extent: Extent) -> None:
        if not 0 <= rank < max(extent.nelements, 1):
            raise MeshIndexError(f"rank {rank} out of range for extent {extent!r}")
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
            raise MeshKeyError(label) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.extent.labels)

    def __len__(self) -> int:
        return len(self.extent.labels)

    def __str__(self) -> str:
        return "{" + ", ".join(
            f"'{k}': {c}/{s}" for k, c, s in zip(self.extent.labels, self._coords, self.extent.sizes, strict=True)
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

    __slots__ = ("extent", "offset", "strides", "_hash")  # _hash: kept (a mesh's cache looks shapes up per call)

    def __init__(self, extent: Extent, offset: int = 0, strides: Sequence[int] | None = None) -> None:
        """A view of ``extent`` at ``offset``; ``strides`` default to dense row-major.

        Raises:
            ValueError: a negative offset, or not one positive stride per label.
        """
        if offset < 0:
            raise ArgumentError(f"shape offset must be >= 0, got {offset}")
        self.extent = extent
        self.offset = offset
        strides = _row_major(extent.sizes) if strides is None else tuple(strides)
        if len(strides) != len(extent.labels) or any(st < 1 for st in strides):
            raise ArgumentError(f"shape needs one positive stride per label {list(extent.labels)}, got {list(strides)}")
        self.strides: tuple[int, ...] = strides
        self._hash: int | None = None

    @classmethod
    def dense(cls, sizes: Mapping[str, int]) -> Shape:
        return cls(Extent.from_dict(sizes))

    @property
    def max_rank(self) -> int:
        """The largest underlying rank this view addresses (strides are positive)."""
        return self.offset + sum((size - 1) * st for size, st in zip(self.extent.sizes, self.strides, strict=True))

    def is_dense(self) -> bool:
        """True when the view is exactly ranks ``0 .. len-1`` in row-major order."""
        return self.offset == 0 and self.strides == _row_major(self.extent.sizes)

    @property
    def labels(self) -> tuple[str, ...]:
        return self.extent.labels

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.extent.sizes

    def __len__(self) -> int:
        return self.extent._n

    def ranks(self) -> list[int]:
        """Underlying ranks of every point, in row-major order."""
        out = []
        for idx in itertools.product(*(range(s) for s in self.extent.sizes)):
            out.append(self.offset + sum(i * st for i, st in zip(idx, self.strides, strict=True)))
        return out

    def rank_of(self, point_rank: int) -> int:
        p = Point(point_rank, self.extent)
        return self.offset + sum(c * st for c, st in zip(p._coords, self.strides, strict=True))

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
                raise ArgumentTypeError(f"mesh has no dimension {label!r}; its dimensions are {list(self.labels)}")
            i = labels.index(label)
            size, stride = sizes[i], strides[i]
            if isinstance(sel, bool) or not isinstance(sel, (int, slice)):
                raise ArgumentTypeError(f"{label}= takes an int or a slice, got {type(sel).__name__}")
            if isinstance(sel, int):
                if not -size <= sel < size:
                    raise MeshIndexError(f"{label}={sel} out of range: dimension {label!r} has size {size}")
                offset += (sel % size) * stride
                del labels[i], sizes[i], strides[i]
            else:
                start, stop, step = sel.indices(size)
                if step < 1:
                    raise MeshIndexError(f"{label}: only positive slice steps are supported, got {step}")
                n = len(range(start, stop, step))
                if n == 0:
                    raise MeshIndexError(f"{label}={sel!r} selects nothing from dimension of size {size}")
                offset += start * stride
                sizes[i], strides[i] = n, stride * step
        return Shape(Extent(labels, sizes), offset, strides)

    def split(self, **kw: Sequence[str] | int) -> Shape:
        """Split dimensions into several: ``split(host=("dp", "pp"), pp=16)``.

        A keyword naming an existing dimension gives the new labels it splits into, in
        row-major order (the last varies fastest); any other keyword gives the size of a
        new label. Per split at most one new size may be left out (it is inferred); the
        sizes must multiply to the original size. The split addresses the same underlying
        ranks, so it also works on sliced and strided shapes. A dimension may reuse its own
        label among its parts (``split(host=("host", "gpu"), gpu=2)``); its size is then the
        inferred one.

        Raises:
            TypeError: a new-label list that is a string or holds non-strings, a size that
                is not an int, or a sequence given for a label the shape lacks.
            ValueError: an empty split; an int given for an existing dimension; a size < 1;
                more than one unknown size in a split; sizes that do not multiply to the
                dimension's size; a new label that clashes with a remaining or another new
                label; a size given for a label no split produces.
        """
        labels = self.extent.labels
        splits: dict[str, tuple[str, ...]] = {}
        given: dict[str, int] = {}
        for key, value in kw.items():
            if key in labels:
                if isinstance(value, int):
                    raise ArgumentError(
                        f"split: {key}={value!r} names an existing dimension; pass a tuple of new labels "
                        f"to split it, e.g. {key}=('a', 'b'); sizes can only be given for new labels"
                    )
                if isinstance(value, str) or not isinstance(value, Sequence):
                    raise ArgumentTypeError(f"split: {key}= takes a sequence of new labels, got {value!r}")
                if not value:
                    raise ArgumentError(f"split: {key}= needs at least one new label")
                if not all(isinstance(v, str) for v in value):
                    raise ArgumentTypeError(f"split: {key}= takes strings as new labels, got {list(value)!r}")
                splits[key] = tuple(value)
            elif isinstance(value, bool) or not isinstance(value, int):
                if isinstance(value, Sequence) and not isinstance(value, str):
                    raise ArgumentTypeError(f"mesh has no dimension {key!r} to split; its dimensions are "
                                            f"{list(labels)}")
                raise ArgumentTypeError(f"split: size of new label {key!r} must be an int, got {type(value).__name__}")
            elif value < 1:
                raise ArgumentError(f"split: size of {key!r} must be positive, got {value}")
            else:
                given[key] = value

        new_names = [n for parts in splits.values() for n in parts]
        kept = [lab for lab in labels if lab not in splits]
        for n in set(new_names):
            if n in kept:
                raise ArgumentError(f"split: new label {n!r} clashes with an existing dimension of {list(labels)}")
            if new_names.count(n) > 1:
                raise ArgumentError(f"split: new label {n!r} appears more than once")
        unused = [k for k in given if k not in new_names]
        if unused:
            raise ArgumentError(f"split: sizes given for {unused}, which no split produces")

        out_labels: list[str] = []
        out_sizes: list[int] = []
        out_strides: list[int] = []
        for label, size, stride in zip(labels, self.extent.sizes, self.strides, strict=True):
            parts = splits.get(label)
            if parts is None:
                out_labels.append(label)
                out_sizes.append(size)
                out_strides.append(stride)
                continue
            unknown = [p for p in parts if p not in given]
            if len(unknown) > 1:
                raise ArgumentError(
                    f"split: cannot infer the sizes of both {unknown[0]!r} and {unknown[1]!r} in "
                    f"{label}={parts!r}; give all but one, e.g. {unknown[1]}=..."
                )
            known = 1
            for p in parts:
                known *= given.get(p, 1)
            sizes = {p: given[p] for p in parts if p in given}
            if unknown:
                sizes[unknown[0]], rem = divmod(size, known)
                if rem:
                    shown = tuple(given.get(p, "?") for p in parts)
                    raise ArgumentError(
                        f"split: dimension {label!r} of size {size} cannot be split into {parts!r} "
                        f"with sizes {shown!r}: {size} is not divisible by {known}"
                    )
            elif known != size:
                shown = tuple(given[p] for p in parts)
                raise ArgumentError(
                    f"split: dimension {label!r} of size {size} cannot be split into {parts!r} "
                    f"with sizes {shown!r}: they multiply to {known}"
                )
            part_sizes = [sizes[p] for p in parts]
            part_strides = [stride * st for st in _row_major(part_sizes)]
            out_labels.extend(parts)
            out_sizes.extend(part_sizes)
            out_strides.extend(part_strides)
        return Shape(Extent(out_labels, out_sizes), self.offset, out_strides)

    def rename(self, **kw: str) -> Shape:
        """Rename dimensions: ``rename(host="dp")``; renames apply at once (swaps work).

        Raises:
            TypeError: a label the shape lacks, or a new label that is not a string.
            ValueError: a new label that is not an identifier, or that clashes with
                another label of the result.
        """
        labels = self.extent.labels
        for old, new in kw.items():
            if old not in labels:
                raise ArgumentTypeError(f"mesh has no dimension {old!r} to rename; its dimensions are {list(labels)}")
            if not isinstance(new, str):
                raise ArgumentTypeError(f"rename: {old}= takes a string, got {type(new).__name__}")
        out = [kw.get(lab, lab) for lab in labels]
        for n in out:
            if out.count(n) > 1:
                raise ArgumentError(f"rename: label {n!r} would appear more than once in {out}")
        return Shape(Extent(out, self.extent.sizes), self.offset, self.strides)

    def flatten(self, name: str) -> Shape:
        """Collapse every dimension into one named ``name`` (row-major order kept).

        Only possible when the view is one arithmetic progression of ranks: each
        dimension's stride must be the next one's stride times its size (dimensions of
        size 1 are ignored). A 0-dimensional shape flattens to size 1.

        Raises:
            TypeError: ``name`` is not a string.
            ValueError: ``name`` is not an identifier, or the mesh is sparse (its ranks
                are not evenly spaced) and cannot be flattened.
        """
        if not isinstance(name, str):
            raise ArgumentTypeError(f"flatten takes a string label, got {type(name).__name__}")
        dims = [(sz, st) for sz, st in zip(self.extent.sizes, self.strides, strict=True) if sz > 1]
        for (_, st), (nsz, nst) in itertools.pairwise(dims):
            if st != nst * nsz:
                raise ArgumentError(
                    f"cannot flatten sparse mesh {self.extent!r} with strides {list(self.strides)}: "
                    f"its ranks are not evenly spaced"
                )
        stride = dims[-1][1] if dims else 1
        return Shape(Extent([name], [len(self)]), self.offset, [stride])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and (self.extent, self.offset, self.strides) == (
            other.extent,
            other.offset,
            other.strides,
        )

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash((self.extent, self.offset, self.strides))
        return h

    def __repr__(self) -> str:
        return f"Shape({self.extent!r}, offset={self.offset}, strides={self.strides})"

    def __reduce__(self):
        return (Shape, (self.extent, self.offset, self.strides))


def _row_major(sizes: Sequence[int]) -> tuple[int, ...]:
    """Dense row-major strides for ``sizes`` (the last dimension has stride 1)."""
    strides, acc = [], 1
    for size in reversed(sizes):
        strides.append(acc)
        acc *= size
    return tuple(reversed(strides))


class MeshTrait:
    """Shape queries and slicing shared by HostMesh, ProcMesh, ActorMesh and ValueMesh.

    Subclasses provide ``_shape`` and ``_new_with_shape(shape)``.
    """

    _shape: Shape

    def _new_with_shape(self, shape: Shape) -> Self:  # pragma: no cover - abstract
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
                raise MeshKeyError(f"mesh has no dimension {d!r}; its dimensions are {list(self._shape.labels)}")
            n *= self._shape.extent[d]
        return n

    def __len__(self) -> int:
        return len(self._shape)

    def slice(self, **kw: int | slice) -> Self:
        """A view of some ranks: ``mesh.slice(hosts=0, gpus=slice(0, 2))``.

        Raises:
            TypeError: unknown dimension label. IndexError: index out of range.
        """
        return self._new_with_shape(self._shape.slice(**kw))

    def split(self, **kw: Sequence[str] | int) -> Self:
        """Split dimensions: ``mesh.split(host=("dp", "pp"), pp=16)`` (see ``Shape.split``).

        Raises:
            TypeError: malformed arguments or a sequence for an unknown dimension.
            ValueError: sizes that do not multiply to the dimension's size, more than one
                inferred size per split, label clashes, or unused sizes.
        """
        return self._new_with_shape(self._shape.split(**kw))

    def rename(self, **kw: str) -> Self:
        """Rename dimensions: ``mesh.rename(host="dp")``.

        Raises:
            TypeError: unknown dimension label. ValueError: the new labels clash.
        """
        return self._new_with_shape(self._shape.rename(**kw))

    def flatten(self, name: str) -> Self:
        """Collapse all dimensions into one named ``name``: ``mesh.flatten("rank")``.

        Raises:
            ValueError: the mesh is sparse (its ranks are not evenly spaced).
        """
        return self._new_with_shape(self._shape.flatten(name))
