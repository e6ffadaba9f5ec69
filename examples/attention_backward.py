"""FlashAttention backward (FlashAttention-2's schedule), written in the language: the forward
saves each row's log-sum-exp, a small kernel computes delta = rowsum(dO * O), one kernel per
key/value block accumulates dK and dV over every query row that sees it (the KV-block-parallel
form: no atomics; with grouped-query attention the group's query heads are summed in the same
program), and one kernel per query block accumulates dQ.  Causal and full; ragged lengths are
masked.  ``attention`` wraps forward and backward as one ``torch.autograd``-able op through
``tilejit.torch`` when PyTorch is present.

    P = softmax(Q Kᵀ · scale)      dV = Pᵀ dO      dP = dO Vᵀ
    dS = P ∘ (dP − delta)          dQ = dS K · scale      dK = dSᵀ Q · scale

The backward kernels recompute P from the saved log-sum-exp in base 2, as FlashAttention-2 does:
``exp2(Q Kᵀ · (scale · log2 e) − lse · log2 e)``, one FMA and one ``ex2`` a score (the argument
is <= 0, since the log-sum-exp bounds every score of its row, so the approximate ``ex2``'s error
stays absolute and below 2e-6 for |lse| < 44).  Spelled ``exp(s − lse)`` the compiler keeps the
accurate exponential (it cannot know that lse bounds s): on sm_90a at D128 (32x128 dK/dV, 128x64
dQ, 8 warps, full) the dK/dV loop took 633 SASS instructions and dQ's 1012, against 318 and 402
in base 2 (``scripts/probes/bwd_sass.py``, 2026-12-07); ``BASE2 = False`` spells it that way.
"""
import numpy as np

import tilejit as tj

LOG2E = 1.4426950408889634
BASE2 = True         # False: P spelled exp(s - lse), the accurate exponential (measured against)


@tj.kernel
def forward_kernel(q, k, v, o, lse, scale: tj.constexpr,
                   BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr, CAUSAL: tj.constexpr):
    """examples/attention.py's forward, which also stores each row's log-sum-exp."""
    start_m = tj.program_id(0) * BM
    heads = q.shape[1]
    batch, head = tj.program_id(1) // heads, tj.program_id(1) % heads
    kv_head = head // (heads // k.shape[1])
    seq_k = k.shape[2]
    stat = lse.dtype                                   # float32 (float64 for float64 inputs)
    qt = tj.load(q, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
    rows = start_m + tj.arange(0, BM)
    m_i = tj.full((BM,), -tj.inf, stat)
    l_i = tj.zeros((BM,), stat)
    acc = tj.zeros((BM, BD), stat)
    end = seq_k
    if CAUSAL:
        end = tj.minimum(seq_k, start_m + BM)
    for start_n in range(0, end, BN):
        kt = tj.load(k, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        s = tj.dot(qt, kt.T).to(stat) * scale
        cols = start_n + tj.arange(0, BN)
        keep = cols[None, :] < seq_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tj.where(keep, s, -tj.inf)
        m_new = tj.maximum(m_i, tj.max(s, axis=1))
        alpha = tj.exp(m_i - m_new)
        p = tj.exp(s - m_new[:, None])
        l_i = l_i * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt).to(stat)
        m_i = m_new
    tj.store(o, (batch, head, start_m, 0), (acc / l_i[:, None]).to(o.dtype).reshape((1, 1, BM, BD)))
    tj.store(lse, (batch, head, start_m), (m_i + tj.log(l_i)).reshape((1, 1, BM)))


@tj.kernel
def delta_kernel(o, do, delta, dq_acc, BM: tj.constexpr, BD: tj.constexpr, RELEASE: tj.constexpr = False):
    """delta = rowsum(dO * O) for BM rows of one head; with ``dq_acc`` (the float32 dQ that the
    dK/dV kernel adds into, ``DQ_ATOMIC``) its rows zeroed too."""
    if RELEASE:                         # the dK/dV kernel may launch now (it waits before reading delta)
        tj.launch_dependents()
    start_m = tj.program_id(0) * BM
    heads = o.shape[1]
    batch, head = tj.program_id(1) // heads, tj.program_id(1) % heads
    if dq_acc is not None:
        tj.store(dq_acc, (batch, head, start_m, 0), tj.zeros((1, 1, BM, BD), tj.float32))
    ot = tj.load(o, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD)).to(delta.dtype)
    dot_ = tj.load(do, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD)).to(delta.dtype)
    tj.store(delta, (batch, head, start_m), tj.sum(ot * dot_, axis=1).reshape((1, 1, BM)))


@tj.kernel
def dkdv_kernel(q, k, v, do, lse, delta, dk, dv, dq_acc, scale: tj.constexpr,
                BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr, CAUSAL: tj.constexpr,
                DEPENDENT: tj.constexpr = False):
    """dK and dV of BN keys of one key/value head: every query row of every query head of its
    group that sees them (from the diagonal down when causal), in one loop over (head, query
    block).  On sm_90a all four DOTs run on wgmma from TMA rings: the compiler computes ``s``,
    ``p``, ``dp`` and ``ds`` transposed, since only their transposes reach DOTs
    (``passes.sink_transposes``: ``Sᵀ = K Qᵀ``, FlashAttention-2's form), and loads ``q`` and
    ``do``, each read by two DOTs, once per DOT (``passes.split_dot_loads``).  ``DEPENDENT``:
    launched while the delta kernel ends (its keys and values are read first, delta after the
    wait), and the dQ kernel may launch while this one runs (it reads nothing this one writes;
    the release comes after the wait, so delta has ended once every CTA has released).
    With ``dq_acc`` (float32, zeroed by the delta kernel) the kernel also adds each block's
    dQ = dS K · scale into it atomically (FlashAttention-2's form: no second pass over the keys),
    computed as dQᵀ = Kᵀ dSᵀ so that it too runs on wgmma (``BN = BD = 16 * num_warps``)."""
    start_n = tj.program_id(0) * BN
    kv_heads = k.shape[1]
    batch, kv_head = tj.program_id(1) // kv_heads, tj.program_id(1) % kv_heads
    group = q.shape[1] // kv_heads
    seq_q, seq_k = q.shape[2], k.shape[2]
    stat = lse.dtype
    kt = tj.load(k, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
    vt = tj.load(v, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
    if DEPENDENT:
        tj.wait_prior_kernels()                       # delta is read in the loop
        tj.launch_dependents()                        # dQ reads delta too: only once it has ended
    cols = start_n + tj.arange(0, BN)
    dk_acc = tj.zeros((BN, BD), stat)
    dv_acc = tj.zeros((BN, BD), stat)
    first = 0
    if CAUSAL:
        first = (start_n // BM) * BM                   # rows above the diagonal see none of these keys
    blocks = tj.cdiv(seq_q - first, BM)               # query blocks per head
    for t in range(0, group * blocks):                  # one loop over (head of the group, block)
        head = kv_head * group + t // blocks
        start_m = first + (t % blocks) * BM
        qt = tj.load(q, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
        dot_ = tj.load(do, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
        rows = start_m + tj.arange(0, BM)
        m = tj.load(lse, (batch, head, start_m), (1, 1, BM)).reshape((BM,))
        d = tj.load(delta, (batch, head, start_m), (1, 1, BM)).reshape((BM,))
        keep = (rows[:, None] < seq_q) & (cols[None, :] < seq_k)
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        if BASE2:
            p = tj.where(keep, tj.exp2(tj.dot(qt, kt.T).to(stat) * (scale * LOG2E) - m[:, None] * LOG2E), 0.0)
        else:
            p = tj.where(keep, tj.exp(tj.dot(qt, kt.T).to(stat) * scale - m[:, None]), 0.0)
        dv_acc += tj.dot(p.T.to(dot_.dtype), dot_).to(stat)
        dp = tj.dot(dot_, vt.T).to(stat)
        ds = p * (dp - d[:, None])
        dk_acc += tj.dot(ds.T.to(qt.dtype), qt).to(stat)
        if dq_acc is not None:
            dq_t = tj.dot(kt.T, ds.T.to(kt.dtype)).to(tj.float32) * scale     # (BD, BM)
            tj.atomic_add(dq_acc, (batch, head, start_m, 0), dq_t.T.reshape((1, 1, BM, BD)))
    tj.store(dk, (batch, kv_head, start_n, 0), (dk_acc * scale).to(dk.dtype).reshape((1, 1, BN, BD)))
    tj.store(dv, (batch, kv_head, start_n, 0), dv_acc.to(dv.dtype).reshape((1, 1, BN, BD)))


@tj.kernel
def dq_kernel(q, k, v, do, lse, delta, dq, scale: tj.constexpr,
              BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr, CAUSAL: tj.constexpr,
              DEPENDENT: tj.constexpr = False):
    """dQ of BM query rows of one head: every key block they see.  ``DEPENDENT``: launched while
    the dK/dV kernel runs, which writes nothing this kernel reads (delta ended before that kernel
    read it); the wait at the end keeps this kernel from ending before that one."""
    start_m = tj.program_id(0) * BM
    heads = q.shape[1]
    batch, head = tj.program_id(1) // heads, tj.program_id(1) % heads
    kv_head = head // (heads // k.shape[1])
    seq_k = k.shape[2]
    stat = lse.dtype
    qt = tj.load(q, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
    dot_ = tj.load(do, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
    m = tj.load(lse, (batch, head, start_m), (1, 1, BM)).reshape((BM,))
    d = tj.load(delta, (batch, head, start_m), (1, 1, BM)).reshape((BM,))
    rows = start_m + tj.arange(0, BM)
    dq_acc = tj.zeros((BM, BD), stat)
    end = seq_k
    if CAUSAL:
        end = tj.minimum(seq_k, start_m + BM)
    for start_n in range(0, end, BN):
        kt = tj.load(k, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        cols = start_n + tj.arange(0, BN)
        keep = cols[None, :] < seq_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        if BASE2:
            p = tj.where(keep, tj.exp2(tj.dot(qt, kt.T).to(stat) * (scale * LOG2E) - m[:, None] * LOG2E), 0.0)
        else:
            p = tj.where(keep, tj.exp(tj.dot(qt, kt.T).to(stat) * scale - m[:, None]), 0.0)
        dp = tj.dot(dot_, vt.T).to(stat)
        ds = p * (dp - d[:, None])
        dq_acc += tj.dot(ds.to(kt.dtype), kt).to(stat)
    tj.store(dq, (batch, head, start_m, 0), (dq_acc * scale).to(dq.dtype).reshape((1, 1, BM, BD)))
    if DEPENDENT:
        tj.wait_prior_kernels()


@tj.kernel
def dq_convert_kernel(dq_acc, dq, BM: tj.constexpr, BD: tj.constexpr, DEPENDENT: tj.constexpr = False):
    """dQ in its dtype from the float32 sums the dK/dV kernel added (``DQ_ATOMIC``)."""
    start_m = tj.program_id(0) * BM
    heads = dq.shape[1]
    batch, head = tj.program_id(1) // heads, tj.program_id(1) % heads
    if DEPENDENT:
        tj.wait_prior_kernels()
    t = tj.load(dq_acc, (batch, head, start_m, 0), (1, 1, BM, BD))
    tj.store(dq, (batch, head, start_m, 0), t.to(dq.dtype))


def _stat_dtype(dtype) -> type:
    """The row statistics' dtype for inputs of ``dtype`` (a NumPy or torch dtype)."""
    return np.float64 if str(dtype).rsplit(".", 1)[-1] == "float64" else np.float32


def forward(q, k, v, causal=False, BM=32, BN=32, empty=np.empty, num_warps=None):
    """(o, lse): the attention output and each row's log-sum-exp (float32; float64 inputs keep
    float64).  ``empty(shape, dtype)`` allocates (``np.empty`` for NumPy, a torch one for torch);
    ``num_warps`` None lets the compiler choose."""
    batch, heads, seq_q, dim = q.shape
    o, lse = empty(q.shape, q.dtype), empty((batch, heads, seq_q), _stat_dtype(q.dtype))
    scale = 1.0 / float(np.sqrt(dim))       # a constexpr: exact in float64 math, float32 in float32's
    forward_kernel[(tj.cdiv(seq_q, BM), batch * heads)](q, k, v, o, lse, scale,
                                                        BM=BM, BN=BN, BD=tj.next_power_of_2(dim), CAUSAL=causal,
                                                        num_warps=num_warps)
    return o, lse


DEPENDENT_LAUNCH = True     # the three kernels launched to overlap each other's ends (tj.launch_dependents)


DQ_ATOMIC = False           # dQ added atomically by the dK/dV kernel instead of its own pass (``dq_config="atomic"``)


def backward(q, k, v, o, lse, do, causal=False, BM=32, BN=64, empty=np.empty, num_warps=4, dq_config=(64, 64, 4),
             dependent_launch=None):
    """(dq, dk, dv) for the output gradient ``do`` (dk, dv summed over each group's query heads).
    ``BM`` x ``BN`` tiles and ``num_warps`` (None: the compiler's choice) for the dK/dV kernel,
    and ``dq_config``'s ``(BM, BN, num_warps)`` for the dQ kernel (None: dK/dV's three).
    The defaults run every DOT on wgmma from TMA rings on sm_90a at D 64 and 128: the wgmma
    side has 16 rows a warp, ``BN = 16 * num_warps`` for dK/dV and ``BM = 16 * num_warps`` for
    dQ (32 x 128 with 8 warps and 128 x 64 with 8 do too).  ``dependent_launch`` (None:
    ``DEPENDENT_LAUNCH``): the dK/dV kernel starts while delta's ends, and the dQ kernel, which
    needs nothing from it, while the dK/dV kernel runs (programmatic dependent launch, sm_90+).
    ``dq_config="atomic"`` (or ``DQ_ATOMIC``): no dQ kernel; the dK/dV kernel adds dQ into a
    float32 buffer (the delta kernel zeroes it) and a small kernel converts it.  Float32 atomic
    sums: dQ's last bits may differ from run to run."""
    dependent = DEPENDENT_LAUNCH if dependent_launch is None else dependent_launch
    batch, heads, seq_q, dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    scale, BD = 1.0 / float(np.sqrt(dim)), tj.next_power_of_2(dim)
    atomic = dq_config == "atomic" or (DQ_ATOMIC and dq_config is None)
    delta = empty((batch, heads, seq_q), lse.dtype)
    dq_acc = empty(q.shape, np.float32) if atomic else None
    delta_kernel[(tj.cdiv(seq_q, BM), batch * heads)](o, do, delta, dq_acc, BM=BM, BD=BD, RELEASE=dependent)
    dq, dk, dv = empty(q.shape, q.dtype), empty(k.shape, k.dtype), empty(v.shape, v.dtype)
    dkdv_kernel[(tj.cdiv(seq_k, BN), batch * kv_heads)](q, k, v, do, lse, delta, dk, dv, dq_acc, scale,
                                                         BM=BM, BN=BN, BD=BD, CAUSAL=causal, DEPENDENT=dependent,
                                                         num_warps=num_warps)
    if atomic:
        dq_convert_kernel[(tj.cdiv(seq_q, BM), batch * heads)](dq_acc, dq, BM=BM, BD=BD, DEPENDENT=dependent)
        return dq, dk, dv
    dq_bm, dq_bn, dq_warps = dq_config or (BM, BN, num_warps)
    dq_kernel[(tj.cdiv(seq_q, dq_bm), batch * heads)](q, k, v, do, lse, delta, dq, scale,
                                                      BM=dq_bm, BN=dq_bn, BD=BD, CAUSAL=causal, DEPENDENT=dependent,
                                                      num_warps=dq_warps)
    return dq, dk, dv


def run(q, k, v, do, causal=False):
    """dq, dk and dv, raveled into one array (``tilejit demo``'s form)."""
    o, lse = forward(q, k, v, causal)
    return np.concatenate([g.ravel() for g in backward(q, k, v, o, lse, do, causal)])


def reference(q, k, v, do, causal=False):
    """``run``'s answer in float64 with NumPy."""
    return np.concatenate([g.ravel() for g in gradients(q, k, v, do, causal)[1:]])


def gradients(q, k, v, do, causal=False):
    """(o, dq, dk, dv) in float64 with NumPy."""
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    q64, do64 = q.astype(np.float64), do.astype(np.float64)
    k64 = np.repeat(k.astype(np.float64), group, axis=1)
    v64 = np.repeat(v.astype(np.float64), group, axis=1)
    scale = 1 / np.sqrt(q.shape[3])
    s = q64 @ np.swapaxes(k64, 2, 3) * scale
    if causal:
        rows, cols = np.arange(s.shape[2])[:, None], np.arange(s.shape[3])[None, :]
        s = np.where(cols <= rows, s, -np.inf)
    p = np.exp(s - s.max(axis=3, keepdims=True))
    p /= p.sum(axis=3, keepdims=True)
    o = p @ v64
    dv = np.swapaxes(p, 2, 3) @ do64
    dp = do64 @ np.swapaxes(v64, 2, 3)
    ds = p * (dp - (do64 * o).sum(axis=3, keepdims=True))
    dq = ds @ k64 * scale
    dk = np.swapaxes(ds, 2, 3) @ q64 * scale
    fold = lambda t: t.reshape(t.shape[0], kv_heads, group, *t.shape[2:]).sum(axis=2)  # noqa: E731
    return o, dq, fold(dk), fold(dv)


def torch_attention():
    """``attention(q, k, v, causal=False)``: the kernels above as one ``torch.autograd``-able
    PyTorch op (``tilejit.torch``; ``torch.compile(fullgraph=True)`` traces it), registered on
    first call.  ``q``: (batch, heads, seq, dim), ``k``/``v``: (batch, kv_heads, seq_k, dim)."""
    global _TORCH_OP
    if _TORCH_OP is None:
        import torch
        import tilejit.torch as tjt

        def allocator(like):
            def empty(shape, dtype):
                dtype = {np.float32: torch.float32, np.float64: torch.float64}.get(dtype, dtype)
                return torch.empty(shape, dtype=dtype, device=like.device)
            return empty

        @tjt.op("tilejit_examples::attention_forward")
        def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
            return forward(q, k, v, causal, empty=allocator(q), **FORWARD_TILES)

        @tjt.op("tilejit_examples::attention_backward")
        def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                               lse: torch.Tensor, do: torch.Tensor,
                               causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return backward(q, k, v, o, lse, do.contiguous(), causal, empty=allocator(q),
                            **backward_tiles(q.shape[-1]))

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs[:3], *output)
            ctx.causal = inputs[3]

        def gradients(ctx, do, _lse_grad):
            q, k, v, o, lse = ctx.saved_tensors
            return (*attention_backward(q, k, v, o, lse, do, ctx.causal), None)

        attention_forward.register_autograd(gradients, setup_context=setup_context)
        _TORCH_OP = lambda q, k, v, causal=False: attention_forward(q, k, v, causal)[0]  # noqa: E731
    return _TORCH_OP


_TORCH_OP = None
# the torch op's forward tiles (the backward's: ``backward_tiles``): wgmma on sm_90a at D 64 and 128
FORWARD_TILES = {"BM": 128, "BN": 64, "num_warps": 8}


def backward_tiles(dim: int) -> dict:
    """``backward``'s tiles for head dim ``dim`` (the torch op's): the largest that keep every
    DOT on wgmma without spilling on sm_90a.  At D <= 64, dK/dV 64 query rows an iteration
    against 128 keys and dQ 128 x 128: on the H100 (session 34, ``scripts/gpu_s34c.sh``) 1.09x /
    1.16x SDPA flash's backward at B16 H16 S1024 D64 full / causal, where 32 x 128 and 128 x 64
    took 1.20x / 1.39x their time.  Above, 32 x 128 and 128 x 64 (64 x 128 and 128 x 128 spill
    at D128): 1.09x / 1.13x at B4 H32 S4096 D128."""
    if dim <= 64:
        return {"BM": 64, "BN": 128, "num_warps": 8, "dq_config": (128, 128, 8)}
    return {"BM": 32, "BN": 128, "num_warps": 8, "dq_config": (128, 64, 8)}


def example_inputs(rng, batch=1, heads=4, kv_heads=2, seq=100, dim=32, dtype=np.float32):
    q = rng.standard_normal((batch, heads, seq, dim)).astype(dtype)
    k = rng.standard_normal((batch, kv_heads, seq, dim)).astype(dtype)
    v = rng.standard_normal((batch, kv_heads, seq, dim)).astype(dtype)
    return q, k, v, rng.standard_normal(q.shape).astype(dtype)


if __name__ == "__main__":
    q, k, v, do = example_inputs(np.random.default_rng(0))
    for causal in (False, True):
        o, lse = forward(q, k, v, causal)
        grads = backward(q, k, v, o, lse, do, causal)
        want = gradients(q, k, v, do, causal)
        for name, got, ref in zip(("o", "dq", "dk", "dv"), (o, *grads), want):
            tj.testing.assert_close(got, ref, rtol=2e-3, atol=2e-3)
        print(f"attention backward {q.shape} kv {k.shape} causal={causal}: "
              f"max error {max(np.abs(g - r).max() for g, r in zip((o, *grads), want)):.2e}")
