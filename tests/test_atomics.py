"""``tj.atomic_add/max/min/and/or/xor/xchg``: an atomic read-modify-write of a block, returning
the old values, on every backend.  The CPU backends run programs one after another, so the old
values there are those of that order; on the GPU only order-free properties are checked."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip, body_error

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]
COMBINE = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor, "xchg": lambda old, new: new}


def _kernel(kind: str):
    fn = getattr(tj, f"atomic_{kind}")

    @tj.kernel
    def rows_into_one(x, y, old, B: tj.constexpr):
        """Every program combines its row of x into y's one row; its old values go to old."""
        p = tj.program_id(0)
        t = tj.load(x, (p, 0), (1, B))
        tj.store(old, (p, 0), fn(y, (0, 0), t, mask=t != 7))
    return rows_into_one


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("kind", list(COMBINE))
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.float32])
def test_each_kind_matches_numpy_program_by_program(backend, kind, dtype, monkeypatch):
    if dtype == np.float32 and kind not in ("add", "xchg"):
        pytest.skip("integer-only kind")
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(len(kind))
    programs, cols = 5, 40                                 # a ragged row: B = 64
    x = rng.integers(0, 50, (programs, cols)).astype(dtype)
    y = rng.integers(0, 50, (1, cols)).astype(dtype)
    old = np.full((programs, cols), 99, dtype)
    want_y, want_old = y.copy(), np.zeros_like(old)
    for p in range(programs):                              # the CPU backends' order
        keep = x[p] != 7
        want_old[p] = np.where(keep, want_y[0], 0)
        want_y[0] = np.where(keep, COMBINE[kind](want_y[0], x[p]), want_y[0])
    _kernel(kind)[(programs,)](x, y, old, B=64)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(old, want_old)


@tj.kernel
def split_k(a, partial, B: tj.constexpr):
    """Split-K style: program (i, k) adds its slice's column sums into out row i."""
    i, k = tj.program_id(0), tj.program_id(1)
    t = tj.load(a, (i * 4, k * B), (4, B))
    tj.atomic_add(partial, (i, 0), tj.sum(t, axis=1)[None, :])


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_k_sums_match_numpy(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(0)
    a = rng.integers(-100, 100, (16, 96)).astype(np.int32)
    out = np.zeros((4, 4), np.int32)
    split_k[(4, 3)](a, out, B=32)
    np.testing.assert_array_equal(out, a.reshape(4, 4, 96).sum(axis=2))


@tj.kernel
def ticket(counter, tickets):
    p = tj.program_id(0)
    tj.store(tickets, (p,), tj.atomic_add(counter, (0,), 1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("warps", [1, 4, 8])
def test_a_counter_hands_out_distinct_tickets(backend, warps, monkeypatch):
    # one element, 32 * warps threads: the first thread updates it, the lanes take its old value
    # by a shuffle and the other warps through shared memory
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    counter, tickets = np.zeros(1, np.int32), np.full(50, -1, np.int32)
    ticket[(50,)](counter, tickets, num_warps=warps)
    assert counter[0] == 50
    assert sorted(tickets.tolist()) == list(range(50))     # every program got its own old value
    if backend != "cuda":
        assert tickets.tolist() == list(range(50))         # programs in order on the CPU backends


def test_old_values_shared_by_warps_assemble(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    specs, consts, _ = ticket.specialise(ticket.bind((np.zeros(1, np.int32), np.zeros(4, np.int32)), {}))
    ptx = ticket.compile(specs, consts, 4, "cuda").artifact.ptx
    assert "shfl.sync.bfly" in ptx and "bar.sync" in ptx
    assemble_or_skip(ptx, "sm_90a")


@tj.kernel
def count_only(counter):
    tj.atomic_add(counter, (0,), 1)                        # the old value unused: any warps


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unused_result_works_with_any_warps(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    counter = np.zeros(1, np.int32)
    count_only[(37,)](counter, num_warps=4)
    assert counter[0] == 37                                # once per program, not once per replica


@pytest.mark.parametrize("body, message", [
    ("tj.atomic_max(y, (0,), t)", "atomic_max: 'y' has dtype float32"),
    ("tj.atomic_add(y, (0,), t, sem='seq_cst')", "sem must be one of"),
    ("tj.atomic_add(y, (0,), t, scope='grid')", "scope must be one of"),
    ("tj.atomic_add(y, (0, 0), t)", "2 offset\\(s\\) given for the rank-1 array 'y'"),
])
def test_bad_atomics_are_errors_at_the_users_line(body, message):
    body_error(body, message, [ArraySpec(tj.float32, 1)] * 2, {"B": 4}, head="    t = tj.load(x, (0,), (B,))\n")


def test_the_ir_text_of_an_atomic_round_trips():
    fn = _kernel("xor").tile_ir([ArraySpec(tj.int32, 2), ArraySpec(tj.int32, 2), ArraySpec(tj.int32, 2)], {"B": 64})
    text = ir.print_function(fn)
    assert "atomic" in text and "kind=" in text
    assert ir.print_function(ir.parse_function(text)) == text


@pytest.mark.parametrize("kind, dtype, ptx", [("add", np.float32, "atom.relaxed.gpu.global.add.f32"),
                                              ("max", np.int64, "atom.relaxed.gpu.global.max.s64"),
                                              ("min", np.uint32, "atom.relaxed.gpu.global.min.u32"),
                                              ("xchg", np.int32, "atom.relaxed.gpu.global.exch.b32")])
def test_atomics_assemble_for_the_gpu(kind, dtype, ptx, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    k = _kernel(kind)
    args = (np.zeros((4, 64), dtype), np.zeros((1, 64), dtype), np.zeros((4, 64), dtype))
    specs, consts, _ = k.specialise(k.bind(args, {"B": 64}))
    text = k.compile(specs, consts, 2, "cuda").artifact.ptx
    assert ptx in text
    assemble_or_skip(text, "sm_90a")


@tj.kernel
def claim(flag, winners):
    p = tj.program_id(0)
    old = tj.atomic_cas(flag, (0,), 0, p + 1)               # the first program to arrive claims it
    tj.store(winners, (p,), old)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compare_and_swap_lets_exactly_one_program_claim_a_flag(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    flag, seen = np.zeros(1, np.int32), np.full(40, -1, np.int32)
    claim[(40,)](flag, seen, num_warps=1)
    winner = int(flag[0])
    assert 1 <= winner <= 40 and seen[winner - 1] == 0         # the winner saw the flag free
    assert (np.delete(seen, winner - 1) == winner).all()        # everyone else saw the winner
    if backend != "cuda":
        assert winner == 1


@tj.kernel
def cas_tile(x, cmp, new, old, B: tj.constexpr):
    tj.store(old, (0,), tj.atomic_cas(x, (0,), tj.load(cmp, (0,), (B,)), tj.load(new, (0,), (B,)),
                                      mask=tj.arange(0, B) != 3))


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint64])
def test_compare_and_swap_of_a_tile(backend, dtype, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(5)
    x = rng.integers(0, 3, 64).astype(dtype)
    cmp, new = rng.integers(0, 3, 64).astype(dtype), rng.integers(10, 20, 64).astype(dtype)
    old = np.zeros(64, dtype)
    want_old = np.where(np.arange(64) != 3, x, 0)
    want_x = np.where((x == cmp) & (np.arange(64) != 3), new, x)
    cas_tile[(1,)](x, cmp, new, old, B=64)
    np.testing.assert_array_equal(old, want_old)
    np.testing.assert_array_equal(x, want_x)


def test_compare_and_swap_assembles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    args = (np.zeros(64, np.int64),) * 4
    specs, consts, _ = cas_tile.specialise(cas_tile.bind(args, {"B": 64}))
    text = cas_tile.compile(specs, consts, 2, "cuda").artifact.ptx
    assert "atom.relaxed.gpu.global.cas.b64" in text
    assemble_or_skip(text, "sm_90a")


def _publish(sem: str):
    @tj.kernel
    def publish(data, count, B: tj.constexpr):
        """Every thread stores its part of the block, then one counter says the block is there."""
        tj.store(data, (tj.program_id(0) * B,), tj.arange(0, B).to(tj.float32))
        tj.atomic_add(count, (0,), tj.full((1,), 1, tj.int32), sem=sem)
    return publish


@pytest.mark.parametrize("sem, before, after", [("relaxed", False, False), ("release", True, False),
                                                ("acquire", False, True), ("acq_rel", True, True)])
def test_a_sem_orders_the_whole_programs_accesses(sem, before, after):
    """The atomic's element belongs to one thread; a release needs every thread's stores before
    it (a barrier first), an acquire every thread's later loads after it (a barrier after)."""
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    tile = _publish(sem).tile_ir((ArraySpec(tj.float32, 1), ArraySpec(tj.int32, 1)), {"B": 256})
    ops = [o for o in compile_to_simt(tile, num_warps=4).body.walk()]
    at = next(i for i, o in enumerate(ops) if o.op is SimtOp.ATOMIC_GLOBAL)
    stored = next(i for i, o in enumerate(ops) if o.op is SimtOp.STORE_GLOBAL)
    assert any(o.op is SimtOp.BARRIER for o in ops[stored:at]) == before
    assert any(o.op is SimtOp.BARRIER for o in ops[at + 1:]) == after
    assert not any(o.op is SimtOp.BARRIER for o in ops[:stored])


@tj.kernel
def count_with(counter, SEM: tj.constexpr):
    tj.atomic_add(counter, (0,), 1, sem=SEM)               # the old value unused


@pytest.mark.parametrize("sem, ptx", [("relaxed", "red.relaxed.gpu.global.add.u32"),
                                      ("release", "red.release.gpu.global.add.u32"),
                                      ("acq_rel", "atom.acq_rel.gpu.global.add.u32")])   # red cannot acquire
def test_an_atomic_whose_old_values_nobody_reads_is_a_reduction(sem, ptx, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    specs, consts, _ = count_with.specialise(count_with.bind((np.zeros(1, np.int32),), {"SEM": sem}))
    text = count_with.compile(specs, consts, 1, "cuda").artifact.ptx
    assert ptx in text and ("atom." in text) is (sem == "acq_rel")
    assemble_or_skip(text, "sm_90a")
