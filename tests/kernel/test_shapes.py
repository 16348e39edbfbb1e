"""Shape algebra: Extent, Point, Shape and the MeshTrait ops (slice/split/rename/flatten)
on plain shapes and on ValueMesh. Pure unit tests: no processes are started."""

from __future__ import annotations

import pickle

import pytest

from tetrarch._runtime.values._shape import Extent, MeshTrait, Point, Shape
from tetrarch._runtime.values._value_mesh import ValueMesh
from tetrarch.testing import scaled

# Pure shape algebra: no transport (run once, not per transport).
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(30))]


class Mesh(MeshTrait):
    """The smallest MeshTrait: a shape over the underlying ranks 0..n-1."""

    def __init__(self, shape: Shape) -> None:
        self._shape = shape

    def _new_with_shape(self, shape: Shape) -> Mesh:
        return Mesh(shape)

    def ranks(self) -> list[int]:
        return self._shape.ranks()


def mesh(**sizes: int) -> Mesh:
    return Mesh(Shape.dense(sizes))


def vmesh(**sizes: int) -> ValueMesh[int]:
    extent = Extent.from_dict(sizes)
    return ValueMesh(extent, list(range(extent.nelements)))


# ---------------------------------------------------------------- Extent


def test_extent_basics():
    e = Extent(["hosts", "gpus"], [2, 4])
    assert e.labels == ("hosts", "gpus") and e.sizes == (2, 4)
    assert e.nelements == 8 and len(e) == 8
    assert e["gpus"] == 4 and dict(e) == {"hosts": 2, "gpus": 4} == e.to_dict()
    assert Extent.from_dict({"hosts": 2, "gpus": 4}) == e and hash(Extent.from_dict(e.to_dict())) == hash(e)
    assert repr(e) == "{'hosts': 2, 'gpus': 4}"
    assert Extent([], []).nelements == 1
    assert pickle.loads(pickle.dumps(e)) == e
    with pytest.raises(KeyError):
        e["nope"]


@pytest.mark.parametrize(
    ("labels", "sizes"),
    [(["a"], [1, 2]), (["a", "a"], [1, 2]), (["a b"], [2]), ([3], [2]), (["a"], [0]), (["a"], [1.5])],
)
def test_extent_rejects_bad_input(labels, sizes):
    with pytest.raises(ValueError):
        Extent(labels, sizes)


# ---------------------------------------------------------------- Point


def test_point_is_a_read_only_mapping_with_rank_and_extent():
    e = Extent(["hosts", "gpus"], [1, 2])
    p = e.point(1)
    assert str(p) == "{'hosts': 0/1, 'gpus': 1/2}"
    assert p.rank == 1 and p.extent is e
    assert dict(p) == {"hosts": 0, "gpus": 1} and list(p) == ["hosts", "gpus"] and len(p) == 2
    assert p["gpus"] == 1 and p == {"hosts": 0, "gpus": 1} and p == Point(1, e)
    assert hash(p) == hash(Point(1, e))
    with pytest.raises(KeyError):
        p["nope"]
    with pytest.raises(TypeError):
        p["gpus"] = 0  # type: ignore[index]
    assert pickle.loads(pickle.dumps(p)) == p


def test_points_enumerate_row_major_last_label_fastest():
    e = Extent(["a", "b", "c"], [2, 3, 2])
    coords = [tuple(p.values()) for p in e.points()]
    assert coords == [(a, b, c) for a in range(2) for b in range(3) for c in range(2)]
    assert [p.rank for p in e.points()] == list(range(12))


def test_point_rank_out_of_range():
    e = Extent(["a"], [3])
    with pytest.raises(IndexError):
        Point(3, e)
    with pytest.raises(IndexError):
        Point(-1, e)
    assert str(Point(0, Extent([], []))) == "{}"


# ---------------------------------------------------------------- Shape / slice


def test_dense_shape_ranks_and_strides():
    s = Shape.dense({"a": 2, "b": 3})
    assert s.strides == (3, 1) and s.offset == 0 and s.ranks() == list(range(6))
    assert s.is_dense() and s.max_rank == 5 and len(s) == 6
    assert pickle.loads(pickle.dumps(s)) == s


@pytest.mark.parametrize(("offset", "strides"), [(-1, None), (0, (1,)), (0, (2, 0))])
def test_shape_rejects_bad_layout(offset, strides):
    with pytest.raises(ValueError):
        Shape(Extent(["a", "b"], [2, 2]), offset, strides)


def test_slice_strided_4x4_maps_to_underlying_ranks():
    m = mesh(a=4, b=4).slice(a=slice(1, 3), b=slice(0, 4, 2))
    assert m.sizes == {"a": 2, "b": 2}
    assert m.ranks() == [4, 6, 8, 10]


def test_sliced_mesh_maps_to_underlying_ranks_like_monarch():
    m = mesh(a=2, b=6).slice(b=slice(1, 3))
    assert m.ranks() == [1, 2, 7, 8]
    assert m.slice(a=1).ranks() == [7, 8]


def test_slice_int_drops_dim_and_slice_keeps_it():
    m = mesh(hosts=2, gpus=4)
    one = m.slice(hosts=1, gpus=slice(0, 4))
    assert one.sizes == {"gpus": 4} and one.ranks() == [4, 5, 6, 7]
    assert m.slice(gpus=-1).ranks() == [3, 7]
    assert m.slice(hosts=0, gpus=2).sizes == {} and m.slice(hosts=0, gpus=2).ranks() == [2]
    assert len(m.slice(gpus=slice(1, None))) == 6


def test_slice_errors():
    m = mesh(hosts=2, gpus=4)
    with pytest.raises(TypeError, match="no dimension 'nope'"):
        m.slice(nope=0)
    with pytest.raises(TypeError):
        m.slice(gpus="0")
    with pytest.raises(IndexError):
        m.slice(gpus=4)
    with pytest.raises(IndexError):
        m.slice(gpus=slice(4, 8))
    with pytest.raises(IndexError):
        m.slice(gpus=slice(None, None, -1))


# ---------------------------------------------------------------- size / sizes / extent / len


def test_size_sizes_extent_len():
    m = mesh(hosts=2, gpus=4)
    assert m.size() == 8 and len(m) == 8
    assert m.size("gpus") == 4 and m.size(["hosts", "gpus"]) == 8 and m.size(("hosts",)) == 2
    assert m.sizes == {"hosts": 2, "gpus": 4}
    assert m.extent == Extent(["hosts", "gpus"], [2, 4])
    with pytest.raises(KeyError):
        m.size("nope")
    assert mesh().size() == 1 and len(mesh()) == 1


# ---------------------------------------------------------------- split


def test_split_with_inferred_size():
    m = mesh(host=32, gpu=8).split(host=("dp", "pp"), pp=16)
    assert m.sizes == {"dp": 2, "pp": 16, "gpu": 8}
    assert m.ranks() == list(range(256))


def test_split_with_all_sizes_and_several_dims():
    m = mesh(host=2, gpus=8).split(gpus=("a", "b"), a=2, b=4)
    assert m.sizes == {"host": 2, "a": 2, "b": 4} and m.ranks() == list(range(16))
    m2 = mesh(host=4, gpu=4).split(host=("dp", "pp"), gpu=("tp", "cp"), pp=2, cp=2)
    assert m2.sizes == {"dp": 2, "pp": 2, "tp": 2, "cp": 2} and m2.ranks() == list(range(16))
    assert m2.slice(pp=1, cp=0).ranks() == [4, 6, 12, 14]


def test_split_addresses_the_same_ranks_on_strided_shapes():
    base = mesh(a=4, b=8).slice(a=slice(1, 4, 2), b=slice(0, 8, 2))  # sizes 2x4, strides (16, 2)
    split = base.split(b=("x", "y"), y=2)
    assert split.sizes == {"a": 2, "x": 2, "y": 2}
    assert split.ranks() == base.ranks() == [8, 10, 12, 14, 24, 26, 28, 30]
    assert split.slice(y=1).ranks() == [10, 14, 26, 30]


def test_split_may_reuse_its_own_label():
    m = mesh(host=8).split(host=("host", "gpu"), gpu=2)
    assert m.sizes == {"host": 4, "gpu": 2} and m.ranks() == list(range(8))


def test_split_into_one_label_is_a_rename():
    assert mesh(a=3, b=2).split(a=("x",)).sizes == {"x": 3, "b": 2}


@pytest.mark.parametrize(
    ("kw", "exc", "match"),
    [
        ({"host": ("dp", "pp"), "pp": 3}, ValueError, r"size 8 .*\('dp', 'pp'\).*\('\?', 3\)"),
        ({"host": ("dp", "pp"), "dp": 2, "pp": 3}, ValueError, r"size 8 .*\(2, 3\)"),
        ({"host": ("dp", "pp")}, ValueError, "cannot infer"),
        ({"host": ("dp", "gpu"), "dp": 2}, ValueError, "clashes"),
        ({"host": ("dp", "dp")}, ValueError, "more than once"),
        ({"host": ("dp", "pp"), "gpu": ("dp", "x")}, ValueError, "more than once"),
        ({"host": ("dp", "pp"), "pp": 2, "zz": 4}, ValueError, "no split produces"),
        ({"host": ("dp", "pp"), "pp": 0}, ValueError, "positive"),
        ({"host": ()}, ValueError, "at least one"),
        ({"host": 2}, ValueError, "existing dimension"),
        ({"host": "dp"}, TypeError, "sequence"),
        ({"host": ("dp", 3)}, TypeError, "strings"),
        ({"nope": ("a", "b")}, TypeError, "no dimension 'nope'"),
        ({"host": ("dp", "pp"), "pp": "2"}, TypeError, "int"),
    ],
)
def test_split_errors(kw, exc, match):
    with pytest.raises(exc, match=match):
        mesh(host=8, gpu=2).split(**kw)


# ---------------------------------------------------------------- rename


def test_rename():
    m = mesh(host=2, gpu=4)
    r = m.rename(host="dp")
    assert r.sizes == {"dp": 2, "gpu": 4} and r.ranks() == m.ranks()
    assert m.rename(host="gpu", gpu="host").sizes == {"gpu": 2, "host": 4}
    assert m.rename(host="host").sizes == m.sizes
    strided = m.slice(gpu=slice(1, 4, 2)).rename(gpu="tp")
    assert strided.sizes == {"host": 2, "tp": 2} and strided.ranks() == [1, 3, 5, 7]


def test_rename_errors():
    m = mesh(host=2, gpu=4)
    with pytest.raises(TypeError, match="no dimension 'nope'"):
        m.rename(nope="x")
    with pytest.raises(ValueError, match="more than once"):
        m.rename(host="gpu")
    with pytest.raises(TypeError):
        m.rename(host=3)
    with pytest.raises(ValueError):
        m.rename(host="not an identifier")


# ---------------------------------------------------------------- flatten


def test_flatten_dense():
    f = mesh(hosts=2, gpus=4).flatten("rank")
    assert f.sizes == {"rank": 8} and f.ranks() == list(range(8))


def test_flatten_contiguous_views():
    m = mesh(a=4, b=4)
    assert m.slice(a=slice(1, 3)).flatten("r").ranks() == [4, 5, 6, 7, 8, 9, 10, 11]
    assert m.slice(a=2).flatten("r").ranks() == [8, 9, 10, 11]
    assert m.slice(b=slice(0, 4, 2)).slice(a=1).flatten("r").ranks() == [4, 6]
    # A size-1 dimension's stride is irrelevant: column 1 of a 4x4 flattens to stride 4.
    assert m.slice(b=slice(1, 2)).flatten("r").ranks() == [1, 5, 9, 13]
    split_then_flat = m.split(a=("x", "y"), y=2).flatten("r")
    assert split_then_flat.ranks() == list(range(16))


def test_flatten_zero_dims_gives_size_one():
    f = mesh(a=2, b=3).slice(a=1, b=2).flatten("r")
    assert f.sizes == {"r": 1} and f.ranks() == [5]
    assert mesh().flatten("r").sizes == {"r": 1}


def test_flatten_sparse_raises():
    with pytest.raises(ValueError, match="sparse"):
        mesh(a=4, b=4).slice(b=slice(0, 2)).flatten("r")
    with pytest.raises(ValueError, match="sparse"):
        mesh(a=4, b=4).slice(a=slice(0, 4, 2), b=slice(0, 4, 2)).flatten("r")
    with pytest.raises(ValueError):
        mesh(a=2).flatten("not ok")


# ---------------------------------------------------------------- ValueMesh


def test_value_mesh_items_values_item_get():
    vm = vmesh(hosts=2, gpus=3)
    assert len(vm) == 6 and vm.values() == list(range(6))
    assert vm.item(hosts=1, gpus=2) == 5 and vm.get(4) == 4
    items = list(vm)
    assert items == list(vm.items())
    assert [(dict(p), v) for p, v in items][:2] == [({"hosts": 0, "gpus": 0}, 0), ({"hosts": 0, "gpus": 1}, 1)]
    assert [p.rank for p, _ in items] == list(range(6))
    assert vm.sizes == {"hosts": 2, "gpus": 3} and vm.extent == Extent(["hosts", "gpus"], [2, 3])


def test_value_mesh_item_errors():
    vm = vmesh(hosts=2, gpus=3)
    with pytest.raises(KeyError):
        vm.item(hosts=0)
    with pytest.raises(KeyError):
        vm.item(hosts=0, gpus=1, extra=0)
    with pytest.raises(IndexError):
        vm.item(hosts=2, gpus=0)
    with pytest.raises(IndexError):
        vm.get(6)
    with pytest.raises(IndexError):
        vm.get(-1)


def test_value_mesh_slicing():
    vm = vmesh(a=4, b=4)
    sliced = vm.slice(a=slice(1, 3), b=slice(0, 4, 2))
    assert sliced.values() == [4, 6, 8, 10] and len(sliced) == 4
    assert sliced.item(a=1, b=1) == 10 and sliced.get(1) == 6
    assert [(dict(p), v) for p, v in sliced.items()][-1] == ({"a": 1, "b": 1}, 10)
    assert vm.slice(a=3, b=3).item() == 15
    # slicing again from a view keeps addressing the underlying list
    assert sliced.slice(b=1).values() == [6, 10]
    prefix = ValueMesh(Extent(["r"], [4]), ["w", "x", "y", "z"]).slice(r=slice(0, 2))
    assert prefix.values() == ["w", "x"] and prefix.get(1) == "x"
    with pytest.raises(IndexError):
        prefix.get(2)


def test_value_mesh_flatten_slice_item_like_test_rank_string():
    vm = ValueMesh(Extent(["hosts", "gpus"], [1, 2]), ["a", "b"])
    assert vm.flatten("r").slice(r=1).item() == "b"
    assert vm.slice(gpus=1).flatten("r").values() == ["b"]


def test_value_mesh_split_rename():
    vm = vmesh(host=2, gpus=8)
    s = vm.split(gpus=("a", "b"), b=4)
    assert s.sizes == {"host": 2, "a": 2, "b": 4} and s.values() == list(range(16))
    assert s.item(host=1, a=1, b=3) == 15
    r = vm.rename(host="dp")
    assert r.item(dp=1, gpus=0) == 8
    with pytest.raises(TypeError):
        vm.rename(nope="x")


def test_value_mesh_from_strided_shape_and_underlying_list():
    shape = Shape(Extent(["a", "b"], [2, 2]), offset=1, strides=(4, 2))
    vm = ValueMesh(shape, list(range(8)))
    assert vm.values() == [1, 3, 5, 7] and vm.item(a=1, b=0) == 5
    assert vm.flatten("r").values() == [1, 3, 5, 7]
    with pytest.raises(ValueError):
        ValueMesh(shape, list(range(7)))


def test_value_mesh_dense_fast_path_matches_general_path():
    values = list("abcdef")
    dense = ValueMesh(Extent(["a", "b"], [2, 3]), values)
    general = ValueMesh(Shape(Extent(["a", "b"], [2, 3])), [*values, "extra"])
    assert dense._dense and not general._dense
    assert dense.values() == general.values() == values
    assert [dense.get(i) for i in range(6)] == [general.get(i) for i in range(6)]
    assert dense == general
    assert not dense.slice(a=1)._dense and dense.slice(a=1).values() == ["d", "e", "f"]
    assert dense.rename(a="x")._dense


def test_value_mesh_length_must_match_extent():
    with pytest.raises(ValueError):
        ValueMesh(Extent(["a"], [3]), [1, 2])
    with pytest.raises(ValueError):
        ValueMesh(Extent(["a"], [3]), [1, 2, 3, 4])
    assert ValueMesh(Extent([], []), ["only"]).item() == "only"


def test_value_mesh_equality():
    a = vmesh(a=2, b=2)
    assert a == vmesh(a=2, b=2)
    assert a != vmesh(b=2, a=2)
    assert a != ValueMesh(Extent(["a", "b"], [2, 2]), [0, 1, 2, 4])
    assert a.slice(a=1) == ValueMesh(Extent(["b"], [2]), [2, 3])
    assert a != [0, 1, 2, 3]


def test_value_mesh_pickle_round_trip():
    vm = ValueMesh(Extent(["hosts", "gpus"], [2, 2]), [{"x": 1}, "s", None, 3.5])
    back = pickle.loads(pickle.dumps(vm))
    assert back == vm and back.extent == vm.extent and back.values() == vm.values()
    view = vmesh(a=4, b=4).slice(a=slice(1, 3), b=slice(0, 4, 2))
    back = pickle.loads(pickle.dumps(view))
    assert back.extent == view.extent and back.values() == [4, 6, 8, 10]
    assert back._values == [4, 6, 8, 10], "only the view's values travel"


def test_value_mesh_repr():
    vm = ValueMesh(Extent(["hosts", "gpus"], [1, 2]), ["a", "b"])
    assert repr(vm) == (
        "ValueMesh({'hosts': 1, 'gpus': 2}):\n(\n"
        "  ({'hosts': 0/1, 'gpus': 0/2}, 'a'),\n"
        "  ({'hosts': 0/1, 'gpus': 1/2}, 'b'),\n)"
    )
