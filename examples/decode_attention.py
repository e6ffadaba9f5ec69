"""Split-KV decode attention (FlashDecoding): a few query rows per sequence (a decode step, or
a short speculative window of ``L`` tokens) against a long key/value cache, with grouped-query
attention.  One program takes one key/value head of one sequence, all ``GROUP`` query heads that
share it (``GROUP * L`` rows of one tensor-core tile), and one slice of ``SPLIT`` cache
positions: the cache is read once, by enough programs to fill the GPU.  Each program keeps an
online softmax over its slice and writes its partial output (normalised) and log-sum-exp; a
second kernel merges the slices per query row:

    o = sum_s exp(lse_s - lse) * o_s,   lse = log(sum_s exp(lse_s))

or, with ``run(..., fused=True)``, one launch: each slice's program also counts itself in
``count`` (one int32 per sequence and key/value head, zero between launches) with a
release-acquire atomic, and the slice that counts last merges the slices of its heads in slice
order (the same bits whoever finishes last) and puts the count back to zero.  The slices of one
head are consecutive programs, so the merges spread over the launch.  Two kernels stay the
default: on the H100 (B8 H32 H_kv 8 D128, KV 8192 / 65536) one launch measured 0.5-1.6% slower,
its merges run by the last slices being dearer than the second, small launch.

Shapes: q (B, H, L, D), k and v (B, H_kv, S, D), H = GROUP * H_kv; partial outputs
(NS * B, H, L, D) and log-sum-exps (NS * B, H, L) in float32, NS = ceil(S / SPLIT) (no slice
is empty).  Causal masking inside the window: query row i (of L) sees cache positions up to
S - L + i, as the last L tokens of the cache are the window's own.

A paged cache (``decode_paged_split_kernel``, ``run_paged``): K and V live in a pool of pages
(pages, H_kv, PAGE, D), shared by all sequences in any order; a block table (B, pages per
sequence) says which page holds positions ``[j * PAGE, (j + 1) * PAGE)`` of sequence b, and
``seq_lens`` each sequence's length.  Each key block is one page, found through the table; the
compiler copies the pages ahead as it does the contiguous cache's blocks (a block offset may
come from a small load in a loop that writes no memory)."""
import numpy as np

import tilejit as tj


@tj.func
def begin(q, batch, head, seq, GROUP, BL, BD):
    """The program's query rows (GROUP heads of BL window positions each), the last cache
    position each sees, and an empty online softmax (row maxima, sums, output)."""
    qt = tj.load(q, (batch, head, 0, 0), (1, GROUP, BL, BD)).reshape((GROUP * BL, BD))
    # row r is window position r % BL of head r // BL; it sees keys up to seq - window + r % BL
    last = seq - q.shape[2] + tj.arange(0, GROUP * BL) % BL
    return (qt, last, tj.full((GROUP * BL,), -tj.inf, tj.float32), tj.zeros((GROUP * BL,), tj.float32),
            tj.zeros((GROUP * BL, BD), tj.float32))


@tj.func
def attend(qt, kt, vt, keep, scale, m_i, l_i, acc):
    """One block of keys and values into the online softmax of the rows of ``qt`` (``keep``: the
    (rows, keys) pairs that count)."""
    s = tj.where(keep, tj.dot(qt, tj.trans(kt)) * scale, -tj.inf)
    m_new = tj.maximum(m_i, tj.max(s, axis=1))
    safe = tj.where(m_new == -tj.inf, 0.0, m_new)                # a row that sees nothing yet
    alpha = tj.exp(m_i - safe)
    p = tj.exp(s - safe[:, None])
    return m_new, l_i * alpha + tj.sum(p, axis=1), acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt)


@tj.func
def finish(o_part, lse_part, row, head, m_i, l_i, acc, GROUP, BL, BD):
    """The slice's normalised output and log-sum-exp (-inf, with zeros, where it saw no key)."""
    seen = l_i > 0
    out = acc / tj.where(seen, l_i, 1.0)[:, None]
    lse = tj.where(seen, m_i + tj.log(tj.where(seen, l_i, 1.0)), -tj.inf)
    tj.store(o_part, (row, head, 0, 0), out.reshape((1, GROUP, BL, BD)))
    tj.store(lse_part, (row, head, 0), lse.reshape((1, GROUP, BL)))


@tj.func
def merge(o_part, lse_part, o, batch, head, GROUP, BL, BD):
    """The output of the GROUP heads from ``head``: their slices' partial outputs weighted by
    exp(lse_s - lse), in slice order (a slice that saw no key has lse -inf: weight 0)."""
    splits = o_part.shape[0] // o.shape[0]
    m = tj.full((GROUP * BL,), -tj.inf, tj.float32)
    total = tj.zeros((GROUP * BL,), tj.float32)
    acc = tj.zeros((GROUP * BL, BD), tj.float32)
    for s in range(splits):
        row = s * o.shape[0] + batch
        lse = tj.load(lse_part, (row, head, 0), (1, GROUP, BL), other=-tj.inf).reshape((GROUP * BL,))
        part = tj.load(o_part, (row, head, 0, 0), (1, GROUP, BL, BD)).reshape((GROUP * BL, BD))
        m_new = tj.maximum(m, lse)
        safe = tj.where(m_new == -tj.inf, 0.0, m_new)
        alpha = tj.exp(m - safe)
        w = tj.exp(lse - safe)
        total = total * alpha + w
        acc = acc * alpha[:, None] + part * w[:, None]
        m = m_new
    out = acc / tj.where(total > 0, total, 1.0)[:, None]
    tj.store(o, (batch, head, 0, 0), out.to(o.dtype).reshape((1, GROUP, BL, BD)))


@tj.func
def last_merges(o_part, lse_part, o, count, batch, head, GROUP, BL, BD):
    """(``fused``) Count this slice in; the slice of this sequence and key/value head that counts
    last merges them all (the atomic orders every slice's stores before its reads) and zeroes the
    count for the next launch."""
    done = tj.atomic_add(count, (tj.program_id(1),), tj.full((1,), 1, tj.int32), sem="acq_rel")
    if tj.max(done) == tj.num_programs(0) - 1:
        merge(o_part, lse_part, o, batch, head, GROUP, BL, BD)
        tj.store(count, (tj.program_id(1),), tj.zeros((1,), tj.int32))


@tj.kernel
def decode_split_kernel(q, k, v, o_part, lse_part, scale, o, count, GROUP: tj.constexpr, BL: tj.constexpr,
                        BN: tj.constexpr, BD: tj.constexpr, SPLIT: tj.constexpr, RELEASE: tj.constexpr = False):
    if RELEASE:                         # the combine's CTAs may launch while the slices run
        tj.launch_dependents()
    split = tj.program_id(0)
    kv_heads = k.shape[1]
    batch = tj.program_id(1) // kv_heads
    kv_head = tj.program_id(1) % kv_heads
    seq = k.shape[2]
    head = kv_head * GROUP
    qt, last, m_i, l_i, acc = begin(q, batch, head, seq, GROUP, BL, BD)
    start = split * SPLIT
    end = tj.minimum(start + SPLIT, seq)
    for n in range(start, end, BN):
        kt = tj.load(k, (batch, kv_head, n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, kv_head, n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        cols = n + tj.arange(0, BN)
        keep = (cols[None, :] < end) & (cols[None, :] <= last[:, None])
        m_i, l_i, acc = attend(qt, kt, vt, keep, scale, m_i, l_i, acc)
    finish(o_part, lse_part, split * q.shape[0] + batch, head, m_i, l_i, acc, GROUP, BL, BD)
    if count is not None:               # one launch: the last slice merges (``o`` and ``count`` given)
        last_merges(o_part, lse_part, o, count, batch, head, GROUP, BL, BD)


@tj.kernel
def decode_paged_split_kernel(q, k_pages, v_pages, block_table, seq_lens, o_part, lse_part, scale, o, count,
                              GROUP: tj.constexpr, BL: tj.constexpr, BD: tj.constexpr, PAGE: tj.constexpr,
                              SPLIT: tj.constexpr, RELEASE: tj.constexpr = False):
    """As ``decode_split_kernel`` over a paged cache: ``k_pages``/``v_pages`` (pages, H_kv, PAGE,
    D), sequence b's positions ``[j * PAGE, (j + 1) * PAGE)`` in page ``block_table[b, j]``, its
    length ``seq_lens[b]`` (a slice past it sees no key)."""
    if RELEASE:
        tj.launch_dependents()
    split = tj.program_id(0)
    kv_heads = k_pages.shape[1]
    batch = tj.program_id(1) // kv_heads
    kv_head = tj.program_id(1) % kv_heads
    seq = tj.sum(tj.load(seq_lens, (batch,), (1,)))
    head = kv_head * GROUP
    qt, last, m_i, l_i, acc = begin(q, batch, head, seq, GROUP, BL, BD)
    start = split * SPLIT
    end = tj.minimum(start + SPLIT, seq)
    for n in range(start, end, PAGE):
        page = tj.sum(tj.load(block_table, (batch, n // PAGE), (1, 1)))      # this block's page
        kt = tj.load(k_pages, (page, kv_head, 0, 0), (1, 1, PAGE, BD)).reshape((PAGE, BD))
        vt = tj.load(v_pages, (page, kv_head, 0, 0), (1, 1, PAGE, BD)).reshape((PAGE, BD))
        cols = n + tj.arange(0, PAGE)
        keep = (cols[None, :] < end) & (cols[None, :] <= last[:, None])
        m_i, l_i, acc = attend(qt, kt, vt, keep, scale, m_i, l_i, acc)
    finish(o_part, lse_part, split * q.shape[0] + batch, head, m_i, l_i, acc, GROUP, BL, BD)
    if count is not None:
        last_merges(o_part, lse_part, o, count, batch, head, GROUP, BL, BD)


@tj.kernel
def decode_combine_kernel(o_part, lse_part, o, BL: tj.constexpr, BD: tj.constexpr, WAIT: tj.constexpr = False):
    heads = o.shape[1]
    if WAIT:                            # launched while the split kernel ends; its slices read after this
        tj.wait_prior_kernels()
    merge(o_part, lse_part, o, tj.program_id(0) // heads, tj.program_id(0) % heads, 1, BL, BD)


@tj.kernel
def decode_combine_gather_kernel(o_part, lse_part, o, NS: tj.constexpr, BL: tj.constexpr, BD: tj.constexpr,
                                 WAIT: tj.constexpr = False):
    """``decode_combine_kernel`` with every slice read at once (``NS``: the slices rounded up to
    a power of two; the rows past the last slice read -inf and zeros): one load of the (NS, BL)
    log-sum-exps and one of the (NS, BL, BD) partial outputs, weighted by exp(lse_s - max lse)
    and summed, instead of a loop whose slices wait on each other's loads.  ``WAIT``: launched
    while the split kernel ends (``tj.wait_prior_kernels``), the index math before the wait."""
    heads = o.shape[1]
    batch = tj.program_id(0) // heads
    head = tj.program_id(0) % heads
    slices = tj.arange(0, NS)
    rows = slices * o.shape[0] + batch
    real = slices < o_part.shape[0] // o.shape[0]          # the buffers' slices, as the loop reads them
    if WAIT:
        tj.wait_prior_kernels()
    lse = tj.load(lse_part, (rows, head, 0), (NS, 1, BL), other=-tj.inf,
                  mask=real[:, None, None]).reshape((NS, BL))
    part = tj.load(o_part, (rows, head, 0, 0), (NS, 1, BL, BD), mask=real[:, None, None, None]).reshape((NS, BL, BD))
    m = tj.max(lse, axis=0)
    w = tj.exp(lse - tj.where(m == -tj.inf, 0.0, m)[None, :])        # a slice that saw no key: 0
    total = tj.sum(w, axis=0)
    acc = tj.sum(part * w[:, :, None], axis=0)
    out = acc / tj.where(total > 0, total, 1.0)[:, None]
    tj.store(o, (batch, head, 0, 0), out.to(o.dtype).reshape((1, 1, BL, BD)))


GATHER_SPLITS = 32      # the most slices the default second kernel reads at once (a (32, BL, BD) tile)
DEPENDENT_LAUNCH = True  # the split kernel releases the combine early, which waits for its slices


def combine(o_part, lse_part, out, splits, window, BD, gather=None, dependent=None):
    """The second kernel: the slices' partial outputs merged into ``out`` (``gather``: all slices
    read at once, ``decode_combine_gather_kernel``; None: where there are at most
    ``GATHER_SPLITS``); ``dependent``: launched with programmatic dependent launch, waiting for
    the split kernel inside (None: ``DEPENDENT_LAUNCH``).  Measured on the H100 (B8 H32 Hkv8 D128, 2026-12-06, alternating):
    105.5-105.9 against 106.1-106.3 us at KV 8192, 703.4-705.3 against 709.5-710.0 at 65536."""
    grid = (out.shape[0] * out.shape[1],)
    if gather is None:
        gather = splits <= GATHER_SPLITS
    wait = DEPENDENT_LAUNCH if dependent is None else dependent
    if gather:
        decode_combine_gather_kernel[grid](o_part, lse_part, out, NS=tj.next_power_of_2(splits),
                                           BL=tj.next_power_of_2(window), BD=BD, WAIT=wait)
    else:
        decode_combine_kernel[grid](o_part, lse_part, out, BL=tj.next_power_of_2(window), BD=BD, WAIT=wait)


def splits_for(seq: int, split: int) -> int:
    return tj.cdiv(seq, split)


def buffers(q, splits, parts=None, out=None):
    """The float32 partial outputs and log-sum-exps of ``splits`` KV slices, and the output
    (each as given, else new NumPy arrays or tensors like ``q``)."""
    batch, heads, window, dim = q.shape
    if parts is None:
        parts = (np.empty((splits * batch, heads, window, dim), np.float32),
                 np.empty((splits * batch, heads, window), np.float32))
    if out is None:
        out = np.empty_like(q) if isinstance(q, np.ndarray) else q.new_empty(q.shape)
    return parts, out


def counts(q, kv_heads, count=None):
    """(``fused``) The arrival counts, one int32 zero per sequence and key/value head (as given,
    else new: NumPy or like ``q``); a launch leaves them at zero for the next."""
    if count is not None:
        return count
    n = q.shape[0] * kv_heads
    if isinstance(q, np.ndarray):
        return np.zeros(n, np.int32)
    if type(q).__module__.startswith("torch"):
        import torch
        return torch.zeros(n, dtype=torch.int32, device=q.device)
    return tj.to_device(np.zeros(n, np.int32))


def run(q, k, v, split=1024, BN=64, num_warps=4, parts=None, out=None, fused=False, count=None,
        gather_combine=None, dependent_launch=None):
    """The decode attention of ``q`` against the cache ``k``, ``v`` (NumPy arrays or device
    tensors; ``parts``: preallocated (o_part, lse_part) float32 buffers, ``out`` the output's,
    e.g. torch tensors).  ``fused``: one launch, the last slice of each head merging (``count``:
    preallocated arrival counts, ``counts``); ``gather_combine``: the second kernel reads every
    slice at once (``decode_combine_gather_kernel``; None: where there are at most
    ``GATHER_SPLITS``; False: the loop, ``decode_combine_kernel``); ``dependent_launch``: the split
    kernel lets the combine launch early (``tj.launch_dependents``) and the combine waits for its
    slices (``tj.wait_prior_kernels``; None: ``DEPENDENT_LAUNCH``)."""
    batch, heads, window, dim = q.shape
    kv_heads, seq = k.shape[1], k.shape[2]
    group = heads // kv_heads
    BL = max(tj.next_power_of_2(window), 16 // min(group, 16))          # GROUP * BL >= 16 rows
    BD = tj.next_power_of_2(dim)
    split = max(BN, split // BN * BN)
    ns = splits_for(seq, split)
    (o_part, lse_part), out = buffers(q, ns, parts, out)
    scale = 1.0 / float(np.sqrt(dim))
    count = counts(q, kv_heads, count) if fused else None
    dependent = DEPENDENT_LAUNCH if dependent_launch is None else dependent_launch
    decode_split_kernel[(ns, batch * kv_heads)](q, k, v, o_part, lse_part, scale, out if fused else None, count,
                                                GROUP=group, BL=BL, BN=BN, BD=BD, SPLIT=split,
                                                RELEASE=dependent and not fused, num_warps=num_warps)
    if not fused:
        combine(o_part, lse_part, out, ns, window, BD, gather_combine, dependent)
    return out


def run_paged(q, k_pages, v_pages, block_table, seq_lens, split=1024, num_warps=4, max_seq=None, parts=None,
              out=None, fused=False, count=None, gather_combine=None, dependent_launch=None):
    """``run`` over a paged cache (see ``decode_paged_split_kernel``; NumPy arrays or device
    tensors).  ``max_seq``: the longest sequence (else read from ``seq_lens``); ``parts``,
    ``out``, ``fused``, ``count``, ``gather_combine`` and ``dependent_launch`` as in ``run``."""
    batch, heads, window, dim = q.shape
    kv_heads, page = k_pages.shape[1], k_pages.shape[2]
    group = heads // kv_heads
    BL = max(tj.next_power_of_2(window), 16 // min(group, 16))
    BD = tj.next_power_of_2(dim)
    split = max(page, split // page * page)
    ns = splits_for(int(seq_lens.max()) if max_seq is None else max_seq, split)
    (o_part, lse_part), out = buffers(q, ns, parts, out)
    count = counts(q, kv_heads, count) if fused else None
    dependent = DEPENDENT_LAUNCH if dependent_launch is None else dependent_launch
    decode_paged_split_kernel[(ns, batch * kv_heads)](q, k_pages, v_pages, block_table, seq_lens, o_part, lse_part,
                                                      1.0 / float(np.sqrt(dim)), out if fused else None, count,
                                                      GROUP=group, BL=BL, BD=BD, PAGE=page, SPLIT=split,
                                                      RELEASE=dependent and not fused, num_warps=num_warps)
    if not fused:
        combine(o_part, lse_part, out, ns, window, BD, gather_combine, dependent)
    return out


def to_pages(k, v, seq_lens, page, rng):
    """A paged copy of the caches ``k``, ``v`` (B, H_kv, S, D): the pages of all sequences in a
    shuffled pool (pages, H_kv, page, D) and the block table (B, ceil(S / page)) int32 (-1 past
    a sequence's pages)."""
    batch, kv_heads, seq, dim = k.shape
    per = tj.cdiv(seq, page)
    need = [tj.cdiv(int(n), page) for n in seq_lens]
    order = rng.permutation(sum(need))
    k_pages = np.zeros((sum(need), kv_heads, page, dim), k.dtype)
    v_pages = np.zeros_like(k_pages)
    table = np.full((batch, per), -1, np.int32)
    used = 0
    for b, pages in enumerate(need):
        for j in range(pages):
            slot = order[used]
            used += 1
            table[b, j] = slot
            width = min(page, seq - j * page)
            k_pages[slot, :, :width] = k[b, :, j * page:j * page + width]
            v_pages[slot, :, :width] = v[b, :, j * page:j * page + width]
    return k_pages, v_pages, table


def reference_paged(q, k, v, seq_lens):
    """``reference`` per sequence over its first ``seq_lens[b]`` cache positions."""
    return np.concatenate([reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n])
                           for b, n in enumerate(int(x) for x in seq_lens)])


def reference(q, k, v, **_):
    """float64: query row i of the window sees cache positions up to S - L + i."""
    heads, kv_heads, window, seq = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    k = np.repeat(k.astype(np.float64), heads // kv_heads, axis=1)
    v = np.repeat(v.astype(np.float64), heads // kv_heads, axis=1)
    s = q.astype(np.float64) @ np.swapaxes(k, 2, 3) / np.sqrt(q.shape[3])
    rows, cols = np.arange(window)[:, None], np.arange(seq)[None, :]
    s = np.where(cols <= seq - window + rows, s, -np.inf)
    p = np.exp(s - s.max(axis=3, keepdims=True))
    return (p / p.sum(axis=3, keepdims=True)) @ v


def example_inputs(rng, batch=2, heads=8, kv_heads=2, window=1, seq=700, dim=64, dtype=tj.bfloat16.np):
    q = rng.standard_normal((batch, heads, window, dim)).astype(dtype)
    k = rng.standard_normal((batch, kv_heads, seq, dim)).astype(dtype)
    v = rng.standard_normal((batch, kv_heads, seq, dim)).astype(dtype)
    return q, k, v


if __name__ == "__main__":
    q, k, v = example_inputs(np.random.default_rng(0))
    out, ref = run(q, k, v, split=256), reference(q, k, v)
    tj.testing.assert_close(out, ref, dtype=tj.bfloat16)
    print(f"decode attention q {q.shape} kv {k.shape}, splits of 256: max error {np.abs(out - ref).max():.2e}")
