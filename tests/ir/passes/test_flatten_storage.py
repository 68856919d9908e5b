"""flatten_storage: n-d accesses -> flat offsets relative to the realized region; Realize -> Allocate."""

from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.passes.flatten_storage import flatten_storage
from tensorforge.ir.stmt import Allocate, BufferStore, Realize
from tensorforge.te.expr import Var, const


def test_two_d_accesses_become_row_major_offsets():
    i, j = Var("i"), Var("j")
    A = Buffer("A", (const(4), const(6)), "float32")
    B = Buffer("B", (const(4), const(6)), "float32")
    out = flatten_storage(BufferStore(B, (i, j), BufferLoad(A, (i, j))))
    assert str(out) == "B[i * 6 + j] = A[i * 6 + j]"


def test_realize_becomes_an_allocate_indexed_from_its_min():
    i = Var("i")
    T = Buffer("T", (const(3), const(5)), "float32")
    A = Buffer("A", (const(100),), "float32")
    body = BufferStore(T, (i, const(4)), BufferLoad(A, (i,)))
    out = flatten_storage(Realize(T, (const(2), const(1)), (const(3), const(5)), body))
    assert isinstance(out, Allocate) and out.extent == const(15)
    assert str(out.body) == "T[i * 5 - 7] = A[i]"  # (i - 2) * 5 + (4 - 1)


def test_padded_strides_are_used():
    i, j = Var("i"), Var("j")
    P = Buffer("P", (const(4), const(6)), "float32", "shared", (const(8), const(1)))
    out = flatten_storage(BufferStore(P, (i, j), const(0.0)))
    assert str(out) == "P[i * 8 + j] = 0.0"
