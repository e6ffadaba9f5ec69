"""The ``emulate`` backend: runs compiled SIMT IR with NumPy -- the same program the GPU gets.

Every value is an array of shape (ctas, threads, registers): a batch of CTAs runs at once, all
threads of a CTA in lockstep (so BARRIER is a sync point by construction).  Control flow is
uniform inside a CTA; CTAs of a batch that disagree on a branch or trip count are split and
run separately.  Global memory is the caller's NumPy arrays (offsets are elements from each
array's first element, any strides, written in place).  Shuffles follow the PTX ``shfl.sync``
definition; elementwise ops use the interpreter's reference semantics.

Checks that catch compiler bugs without a GPU: a shared-memory read of bytes another thread
wrote since the last BARRIER (or a write of bytes another thread read or wrote since then)
is a race; a ``vec`` access whose offsets are not contiguous or whose address is not aligned
is an error; control values must be uniform across each CTA.  Tensor-core ops, async copies,
TMA, mbarriers and warp specialisation are ``emulate_async.AsyncOps``, a mixin of ``Machine``
(through ``emulate_mma``'s PTX fragment maps and ``emulate_tma``); an async copy writes shared
memory only when a CP_ASYNC_WAIT retires its group, and reading bytes a copy still has in
flight is an error, so a missing or too-weak wait is caught.  ``emulate_frame`` holds the
pieces all of them share (``EmulatorError``, ``Frame``, ``uniform``).

Programmatic dependent launch: each launch remembers the elements it wrote (up to
``DEPENDENCY_CHECK_LIMIT``; a launch with TMA stores leaves them unknown).  A kernel that calls
``tj.wait_prior_kernels()`` runs, on the GPU, while that launch ends: reading, storing or
atomically updating one of those elements before its wait is an error here (cp.async copies are
checked too; TMA box loads before the wait are not).
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from tilejit import abi
from tilejit.abi import ParamKind
from tilejit import backends, ir, simt
from tilejit.backends import emulate_mma, emulate_tma
from tilejit.backends.emulate_async import AsyncOps
from tilejit.backends.emulate_frame import FENCED, WARP, EmulatorError, Frame, uniform  # noqa: F401 (re-exported)
from tilejit.errors import DeviceAssertError, LaunchError
from tilejit.backends.interpret import atomic_combine, elementwise_fn
from tilejit.simt import MapType, PtrType, SimtOp, SplitAttrs

MAX_BATCH_THREADS = 1 << 16
DEPENDENCY_CHECK_LIMIT = 1 << 22   # the most written elements a launch remembers for the next one
# what the last launch wrote: (a weak reference to the array owning the memory, its byte
# addresses) per array; None: unknown
_last_writes: list | None = []



def forget_writes() -> None:
    """Another backend launched since: the next waiting kernel has no emulated launch before it
    to check against."""
    global _last_writes
    _last_writes = None


class GlobalArray:
    """An array argument as global memory: element offsets from its first element."""

    def __init__(self, a: np.ndarray, name: str):
        self.array, self.name, self.item = a, name, a.itemsize
        strides = [s // a.itemsize for s in a.strides]
        lo = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, strides)) if a.size else 0
        hi = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, strides)) if a.size else -1
        low = a[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in a.strides)]
        # as_strided goes through __array_interface__, whose typestr ('<f1') NumPy cannot read
        # back for ml_dtypes' float8: stride the bits as unsigned ints and view them again
        bits = low.view(f"u{a.itemsize}") if a.dtype.kind == "V" or a.dtype.itemsize == 1 else low
        self.flat = np.lib.stride_tricks.as_strided(bits, shape=(hi - lo + 1,), strides=(a.itemsize,),
                                                    writeable=a.flags.writeable).view(a.dtype)
        self.base = -lo
        self.address = a.__array_interface__["data"][0]

    def index(self, offsets: np.ndarray) -> np.ndarray:
        idx = offsets.astype(np.int64) + self.base
        if idx.size and (idx.min() < 0 or idx.max() >= len(self.flat)):
            raise EmulatorError(f"access outside argument '{self.name}' (a masked-in element is out of bounds)")
        return idx



class Machine(AsyncOps):
    """One launch of a SIMT function over a grid."""

    def __init__(self, fn: ir.Function, grid, params: list, race_check: bool = True):
        self.fn, self.grid, self.params, self.race_check = fn, tuple(grid), params, race_check
        self.threads = fn.meta.cta_threads
        self.tid = np.arange(self.threads, dtype=np.int32)
        self.wgmma_open, self.wgmma_groups = [], []
        self.shared_bytes = -(-fn.meta.shared_bytes // 16) * 16 + 16
        self.baton, self.side = None, 0          # a warp-specialised IF's sides (run_split)
        self.cluster = fn.meta.cluster_ctas      # CTAs per cluster along x (a batch holds whole clusters)
        self.ew_cache: dict = {}
        # programmatic dependent launch: what the last launch wrote, checked until this kernel's wait
        self.waits = simt.waits_on_prior_kernels(fn)
        self.prior = _last_writes if self.waits else None
        self.waited = True
        self.written: dict | None = {}           # id(owner) -> (weak ref, byte addresses) this launch writes
        self.written_count = 0

    def run(self) -> None:
        global _last_writes
        _last_writes = None                      # unknown until this launch ends
        self.run_batches()
        if self.written is not None:
            _last_writes = [(ref, np.unique(np.concatenate(parts))) for ref, parts in self.written.values()]

    def wrote(self, ptr: "GlobalArray", idx: np.ndarray) -> None:
        """Remember the elements ``ptr.flat[idx]`` this launch writes (for the next launch's
        check), with the array that owns their memory: once it is gone, NumPy may hand the same
        addresses to another array."""
        if self.written is None:
            return
        self.written_count += idx.size
        if self.written_count > DEPENDENCY_CHECK_LIMIT:
            self.written = None
            return
        owner = ptr.array
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        entry = self.written.setdefault(id(owner), (weakref.ref(owner), []))
        entry[1].append(ptr.address + (np.ravel(idx).astype(np.int64) - ptr.base) * ptr.item)

    def before_wait(self, ptr: "GlobalArray", idx: np.ndarray, what: str) -> None:
        """Before this kernel's ``tj.wait_prior_kernels()``: touching an element the last launch
        wrote is an error (on the GPU that launch may still be running)."""
        if self.waited or not self.prior or not np.size(idx):
            return
        addr = ptr.address + (np.ravel(idx).astype(np.int64) - ptr.base) * ptr.item
        if any(ref() is not None and np.isin(addr, written).any() for ref, written in self.prior):
            raise EmulatorError(f"{what} argument '{ptr.name}' before tj.wait_prior_kernels(), at elements the "
                                "kernel launched before this one wrote: launched while that kernel ends, this "
                                "kernel may see them before that kernel's writes; move it after the wait")

    def run_batches(self) -> None:
        gx, gy, gz = self.grid
        ids = np.array([(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)], np.int32)
        batch = max(1, MAX_BATCH_THREADS // self.threads)
        batch = max(self.cluster, batch // self.cluster * self.cluster)
        if gx % self.cluster:
            raise EmulatorError(f"kernel '{self.fn.name}': a grid of {gx} CTAs along x is not made of clusters "
                                f"of {self.cluster}")
        with np.errstate(all="ignore"):
            for start in range(0, len(ids), batch):
                self.block_ids = ids[start:start + batch]
                self.waited = not self.waits             # each CTA waits for itself
                c = len(self.block_ids)
                self.shared = np.zeros((c, self.shared_bytes), np.uint8)
                self.wgmma_open, self.wgmma_groups = [], []   # shared bytes in-flight wgmmas read
                self.writer = np.full((c, self.shared_bytes), -1, np.int32)
                self.reader = np.full((c, self.shared_bytes), -1, np.int32)
                # the async proxy (wgmma, TMA stores) sees a thread's ordinary store once that
                # thread's fence.proxy.async and then a barrier follow it: the writer until the
                # fence, FENCED until the barrier, -1 once published
                self.unfenced = np.full((c, self.shared_bytes), -1, np.int32)
                self.copies = emulate_mma.AsyncCopies()
                self.mbarriers = emulate_tma.Mbarriers(self.shared_bytes, c)
                self.epochs = emulate_tma.ConsumerEpochs(c, self.shared_bytes)
                self.unordered = np.zeros((c, self.shared_bytes), bool)   # written since the last cluster barrier
                self.remote_reads = False                # another CTA's bytes read since then
                self.bulk_reads = []                     # (CTA row, shared bytes) TMA_STOREs still read
                self.block(self.fn.body, Frame({}, np.arange(c)))
                if self.bulk_reads:
                    raise EmulatorError(f"kernel '{self.fn.name}' ends before the TMA_STORE_WAIT of a TMA_STORE: "
                                        "its CTA's shared memory may be reused while the copy reads it")
                if self.remote_reads:
                    raise EmulatorError(f"kernel '{self.fn.name}' ends without a cluster barrier after reading "
                                        "another CTA's shared memory: that CTA may already have left")
                if self.wgmma_groups or self.wgmma_open:
                    raise EmulatorError(f"kernel '{self.fn.name}' ends with wgmma groups in flight: a WGMMA_WAIT 0 "
                                        "is missing, so their accumulators were read before they were complete")

    def full(self, f: Frame, value, dtype, n: int = 1) -> np.ndarray:
        return np.full((len(f.ids), self.threads, n), value, dtype)

    def block(self, block: ir.Block, f: Frame):
        """Run ``block``; the operands of its YIELD (or None)."""
        for o in block.ops:
            if o.op is SimtOp.YIELD:
                return [f[x] for x in o.operands]
            try:
                result = getattr(self, f"op_{o.op.name}")(o, f)
            except EmulatorError as err:          # name the user's line the failing op came from
                raise err.at(o.loc, self.fn.name) from None
            if o.results and len(o.results) == 1 and not o.regions:
                f[o.result] = result
        return None

    # --- geometry, params, registers -------------------------------------------------------------
    def op_THREAD_ID(self, o, f):
        return np.broadcast_to(self.tid[None, :, None], (len(f.ids), self.threads, 1))

    def op_BLOCK_ID(self, o, f):
        ids = self.block_ids[f.ids, o.attrs.axis]
        return np.broadcast_to(ids[:, None, None], (len(f.ids), self.threads, 1))

    def op_GRID_DIM(self, o, f):
        return self.full(f, self.grid[o.attrs.axis], np.int32)

    def op_PARAM(self, o, f):
        value = self.params[o.attrs.axis]
        if isinstance(o.result.type, (PtrType, MapType)):
            return value
        return self.full(f, value, o.result.type.dtype.np)

    def op_CONSTANT(self, o, f):
        values = np.array(o.attrs.values).astype(o.result.type.dtype.np)
        return np.broadcast_to(values, (len(f.ids), self.threads, len(values)))

    def op_SPLAT(self, o, f):
        x = f[o.operands[0]]
        return np.broadcast_to(x[:, :, :1], x.shape[:2] + (o.result.type.n,))

    def op_GATHER(self, o, f):
        return f[o.operands[0]][:, :, list(o.attrs.indices)]

    def op_CONCAT(self, o, f):
        return np.concatenate([f[x] for x in o.operands], axis=2)

    def op_ELEMENTWISE(self, o, f):
        fn = self.ew_cache.get(o)
        if fn is None:
            fn = elementwise_fn(o.attrs.op, o.result.type.dtype, [x.type.dtype for x in o.operands])
            self.ew_cache[o] = fn
        out = fn(*[f[x] for x in o.operands])
        return np.broadcast_to(out, f[o.operands[0]].shape[:2] + (o.result.type.n,))

    # --- warp shuffles -----------------------------------------------------------------------------
    def op_SHUFFLE_XOR(self, o, f):
        src = (self.tid & ~(WARP - 1)) | ((self.tid & (WARP - 1)) ^ o.attrs.mask)
        return f[o.operands[0]][:, src, :]

    def op_SHUFFLE_IDX(self, o, f):
        x, lane = f[o.operands[0]], f[o.operands[1]][:, :, 0]
        src = (self.tid & ~(WARP - 1))[None, :] | (lane & (WARP - 1))
        return np.take_along_axis(x, np.broadcast_to(src[:, :, None], x.shape), axis=1)

    # --- global memory -----------------------------------------------------------------------------
    def check_vector(self, o, ptr: GlobalArray, offs: np.ndarray, mask: np.ndarray) -> None:
        v = o.attrs.vec
        if v == 1:
            return
        groups = offs.reshape(offs.shape[:2] + (-1, v)).astype(np.int64)
        if not (groups - groups[..., :1] == np.arange(v)).all():
            raise EmulatorError(f"{o.op.name} vec={v}: offsets of a group are not contiguous")
        masks = mask.reshape(groups.shape)
        if getattr(o.attrs, "prefix", False) and (masks[..., 1:] & ~masks[..., :-1]).any():
            raise EmulatorError(f"{o.op.name} vec={v} promises masks that hold on a prefix of each group "
                                "(GlobalAttrs.prefix), but a group's mask holds after a register where it does not")
        whole = masks.all(axis=-1)
        addr = ptr.address + groups[..., 0][whole] * ptr.item
        if (addr % (v * ptr.item)).any():
            raise EmulatorError(f"{o.op.name} vec={v}: a group is not {v * ptr.item}-byte aligned")

    def op_LOAD_GLOBAL(self, o, f):
        ptr, offs, mask = f[o.operands[0]], f[o.operands[1]], f[o.operands[2]]
        self.check_vector(o, ptr, offs, mask)
        out = self.full(f, o.attrs.other, o.result.type.dtype.np, o.result.type.n)
        idx = ptr.index(offs[mask])
        self.before_wait(ptr, idx, "reads")
        out[mask] = ptr.flat[idx]
        return out

    def op_STORE_GLOBAL(self, o, f):
        ptr, offs, value, mask = (f[x] for x in o.operands)
        self.check_vector(o, ptr, offs, mask)
        if not ptr.flat.flags.writeable:
            raise LaunchError(f"argument '{ptr.name}' is stored to but is read-only")
        idx = ptr.index(offs[mask])
        self.before_wait(ptr, idx, "stores to")
        self.wrote(ptr, idx)
        ptr.flat[idx] = value[mask]

    def op_PRINT(self, o, f):
        """Each program's lines in element order (a GPU interleaves them in no set order)."""
        ops = [f[x] for x in o.operands]
        coords, values, mask = ops[3:3 + o.attrs.rank], ops[3 + o.attrs.rank:-1], ops[-1]
        for row in range(mask.shape[0]):
            lines = {}                      # (program, element): a CTA may hold several programs
            for t, r in zip(*np.nonzero(mask[row])):
                index = tuple(int(c[row, t, r]) for c in coords)
                pid = tuple(int(p[row, t, 0]) for p in ops[:3])
                lines[pid, index] = ir.print_line(pid, () if o.attrs.scalar else index, o.attrs.prefix,
                                                  [v[row, t, r].item() for v in values])
            for index in sorted(lines):
                print(lines[index], flush=True)

    def op_GRID_DEPENDENCY(self, o, f):
        """The emulator runs launches one after another, so the prior kernels have ended; a wait
        ends the check of what this kernel touches before it (``before_wait``)."""
        if o.attrs.action == "wait":
            self.waited = True

    def op_ASSERT(self, o, f):
        """The first failing element (in program, thread and register order) raises."""
        ops = [f[x] for x in o.operands]
        coords, failed = ops[3:-1], ops[-1]
        hits = np.argwhere(failed)
        if len(hits):
            row, t, r = (int(i) for i in hits[0])
            pid = [int(p[row, t, 0]) for p in ops[:3]]
            index = () if o.attrs.scalar else tuple(int(c[row, t, r]) for c in coords)
            raise DeviceAssertError(ir.assert_message(pid, index, o.attrs.msg), o.loc)

    def op_ATOMIC_GLOBAL(self, o, f):
        """Lanes update one after another, in thread and register order: every read-modify-write is
        whole (two lanes on one element see each other's writes)."""
        ptr, offs, value, mask = (f[x] for x in o.operands[:4])
        cmp = f[o.operands[4]] if len(o.operands) > 4 else None
        if not ptr.flat.flags.writeable:
            raise LaunchError(f"argument '{ptr.name}' is stored to but is read-only")
        old = np.zeros(value.shape, value.dtype)
        touched = ptr.index(offs[mask])
        self.before_wait(ptr, touched, "atomically updates")
        self.wrote(ptr, touched)
        for index in zip(*np.nonzero(mask)):
            at = ptr.index(offs[index][None])[0]
            current = ptr.flat[at]
            old[index] = current
            ptr.flat[at] = atomic_combine(o.attrs.kind, current, value[index], None if cmp is None else cmp[index])
        return old

    # --- shared memory -------------------------------------------------------------------------------
    def shared_index(self, o, f, addr: np.ndarray, item: int):
        if (addr % item).any() or addr.min() < 0 or addr.max() + item > self.shared_bytes:
            raise EmulatorError(f"{o.op.name}: misaligned or out-of-range shared address")
        rows = np.broadcast_to(f.ids[:, None, None], addr.shape)
        return rows, addr

    def race(self, o, f, rows, addr, track: np.ndarray, others_of: str):
        if not self.race_check:
            return
        seen = track[rows, addr]
        tid = np.broadcast_to(self.tid[None, :, None], addr.shape)
        if ((seen != -1) & (seen != tid)).any():
            raise EmulatorError(f"shared-memory race: {o.op.name} touches bytes {others_of} "
                                f"another thread since the last BARRIER")

    def mark(self, track, rows, addr):
        """Record who touched each element (by its first byte: lowering never mixes element
        sizes within one buffer between two barriers)."""
        if self.race_check:
            track[rows, addr] = np.broadcast_to(self.tid[None, :, None], addr.shape)
        self.consumer_touch(rows, addr)

    def op_LOAD_SHARED(self, o, f):
        dt = o.result.type.dtype.np
        addr = f[o.operands[0]].astype(np.int64)
        rows, addr = self.shared_index(o, f, addr, dt.itemsize)
        self.check_landed(o, rows, addr)
        self.race(o, f, rows, addr, self.writer, "written by")
        self.mark(self.reader, rows, addr)
        value = self.shared.view(dt)[rows, addr // dt.itemsize]
        if len(o.operands) > 1:         # every address is read; masked-off registers hold other
            value = np.where(f[o.operands[1]], value, self.full(f, o.attrs.other, dt, value.shape[-1]))
        return value

    def op_STORE_SHARED(self, o, f):
        addr, value = f[o.operands[0]].astype(np.int64), f[o.operands[1]]
        dt = value.dtype
        if self.wgmma_groups or self.wgmma_open:
            self.check_wgmma_reads(o, f, addr[..., None] + np.arange(dt.itemsize))
        rows, addr = self.shared_index(o, f, addr, dt.itemsize)
        if self.bulk_reads:
            self.check_bulk_reads(o, rows, addr)
        self.race(o, f, rows, addr, self.writer, "written by")
        self.race(o, f, rows, addr, self.reader, "read by")
        self.mark(self.writer, rows, addr)
        if self.race_check:
            self.unfenced[rows[..., None], addr[..., None] + np.arange(dt.itemsize)] = \
                np.broadcast_to(self.tid[None, :, None, None], addr.shape + (dt.itemsize,))
        self.shared.view(dt)[rows, addr // dt.itemsize] = value
        if self.cluster > 1:
            self.unordered[rows[..., None], addr[..., None] + np.arange(dt.itemsize)] = True

    # --- thread-block clusters (cluster_rows) ------------------------------------------------------
    def op_CLUSTER_BARRIER(self, o, f):
        if len(f.ids) != len(self.block_ids):
            raise EmulatorError("CLUSTER_BARRIER reached by only some of a cluster's CTAs")
        self.op_BARRIER(o, f)
        self.unordered[:] = False
        self.remote_reads = False

    def op_LOAD_SHARED_CLUSTER(self, o, f):
        dt = o.result.type.dtype.np
        addr = f[o.operands[0]].astype(np.int64)
        rank, on = f[o.operands[1]][:, :, 0].astype(np.int64), f[o.operands[2]][:, :, 0].astype(bool)
        out = self.full(f, o.attrs.other, dt, addr.shape[-1]).copy()
        if not on.any():
            return out
        if (rank[on] < 0).any() or (rank[on] >= self.cluster).any():
            raise EmulatorError(f"LOAD_SHARED_CLUSTER of rank {int(rank[on].max())} in clusters of {self.cluster} CTAs")
        rows, addr = self.shared_index(o, f, addr, dt.itemsize)
        rows = rows - self.block_ids[rows, 0] % self.cluster + rank[:, :, None]    # the batch row of that CTA
        sel = np.broadcast_to(on[:, :, None], addr.shape)
        rows, addr = rows[sel], addr[sel]
        if self.unordered[rows[:, None], addr[:, None] + np.arange(dt.itemsize)].any():
            raise EmulatorError("LOAD_SHARED_CLUSTER reads shared memory of another CTA of the cluster that it "
                                "wrote after the last cluster barrier (a CLUSTER_BARRIER is missing)")
        self.remote_reads = True
        out[sel] = self.shared.view(dt)[rows, addr // dt.itemsize]
        return out

    def op_BARRIER_ARRIVE(self, o, f):
        """An arrival that waits for nothing (the warpgroups' ping-pong turns, ``pingpong``): no
        ordering of this thread's accesses for the race check (it only ever adds a wait elsewhere)."""

    def op_BARRIER(self, o, f):
        self.writer[f.ids] = -1
        self.reader[f.ids] = -1
        if self.race_check:
            seen = self.unfenced[f.ids]
            seen[seen == FENCED] = -1
            self.unfenced[f.ids] = seen

    # --- control flow ------------------------------------------------------------------------------
    def split(self, o, f: Frame, keys: np.ndarray, run) -> None:
        """Run ``run(frame, key)`` per group of CTAs sharing a control ``key``; merge results."""
        groups = {}
        for i, k in enumerate(map(tuple, keys)):
            groups.setdefault(k, []).append(i)
        if len(groups) == 1:
            results = run(f, next(iter(groups)))
        else:
            results = None
            for k, members in groups.items():
                sel = np.array(members)
                part = run(f.subset(sel), k)
                if results is None:
                    results = [np.empty((len(f.ids),) + p.shape[1:], p.dtype) for p in part]
                for r, p in zip(results, part):
                    r[sel] = p
        for r, x in zip(o.results, results or []):
            f[r] = x

    def op_FOR(self, o, f):
        bounds = np.stack([uniform(f[x], "a loop bound") for x in o.operands[:3]], axis=1)
        body = o.regions[0]

        def run(frame, key):
            lb, ub, step = (int(k) for k in key)
            carried = [frame[x] for x in o.operands[3:]]
            for i in range(lb, ub, step):
                frame[body.args[0]] = self.full(frame, i, body.args[0].type.dtype.np)
                for a, v in zip(body.args[1:], carried):
                    frame[a] = v
                carried = self.block(body, frame)
            return carried
        self.split(o, f, bounds, run)

    def op_IF(self, o, f):
        if isinstance(o.attrs, SplitAttrs):
            return self.run_split(o, f)
        cond = uniform(f[o.operands[0]], "an if condition").astype(bool)
        self.split(o, f, cond[:, None], lambda frame, key: self.block(o.regions[0 if key[0] else 1], frame))

    def op_WHILE(self, o, f):
        body = o.regions[0]
        carried = [f[x] for x in o.operands]
        results = [np.empty((len(f.ids),) + c.shape[1:], c.dtype) for c in carried]
        where, frame = np.arange(len(f.ids)), f
        while True:
            for a, v in zip(body.args, carried):
                frame[a] = v
            out = self.block(body, frame)
            cond = uniform(out[0], "a while condition").astype(bool)
            for r, v in zip(results, out[1:]):
                r[where[~cond]] = v[~cond]
            if not cond.any():
                break
            keep = np.nonzero(cond)[0]
            carried = [v[keep] for v in out[1:]]
            if len(keep) < len(where):
                frame, where = frame.subset(keep), where[keep]
        for r, x in zip(o.results, results):
            f[r] = x


# ------------------------------------------------------------------------------- launching
def bind_params(fn: ir.Function, args: list) -> list:
    """The value of each ``meta["params"]`` entry for host arguments ``args``."""
    names = fn.arg_names
    wanted = 1 + max((p.arg for p in fn.meta.params), default=-1)
    if len(args) < wanted:
        raise LaunchError(f"kernel '{fn.meta.name}' takes {wanted} runtime arguments, "
                          f"got {len(args)}")
    arrays = {}
    out = []
    for p in fn.meta.params:
        arg = args[p.arg]
        name = names[p.arg] if p.arg < len(names) else f"#{p.arg}"
        if p.kind is ParamKind.SCALAR:
            out.append(np.asarray(arg).astype(p.dtype.np)[()])
            continue
        if p.arg not in arrays:
            arrays[p.arg] = GlobalArray(_host_array(arg, name), name)
        a = arrays[p.arg]
        if p.kind in (ParamKind.PTR, ParamKind.WORKSPACE):
            out.append(a)
        elif p.kind is ParamKind.TENSOR_MAP:
            out.append(emulate_tma.EmulatedMap(a, p))
        elif p.kind is ParamKind.DIM:
            out.append(p.dtype.np.type(a.array.shape[p.axis]))
        else:
            out.append(p.dtype.np.type(a.array.strides[p.axis] // a.item))
    return out


def _host_array(arg, name: str) -> np.ndarray:
    if isinstance(arg, np.ndarray):
        return arg
    device = getattr(arg, "__dlpack_device__", None)
    if device is not None and device()[0] == 1:
        return np.from_dlpack(arg)
    raise LaunchError(f"argument '{name}': the emulate backend runs on host memory and cannot "
                      f"use a {type(arg).__name__}; pass a NumPy array")


def run(fn: ir.Function, grid, args: list, race_check: bool = True) -> None:
    """Run SIMT function ``fn`` over ``grid`` programs (int or tuple of up to 3 ints) on host ``args``
    (NumPy arrays, written in place, and scalars, in the kernel's runtime-argument order)."""
    grid = (grid,) if isinstance(grid, int) else tuple(grid)
    if fn.meta.paired_ctas and len(args) == len(fn.arg_names):      # clusters of two programs
        grid, args = backends.launch_geometry(1, grid, args, paired=True)
    elif fn.meta.cluster_ctas > 1:          # ``grid`` counts programs: each is a cluster of CTAs
        grid, args = backends.launch_geometry(1, grid, args, cluster=fn.meta.cluster_ctas)
    if fn.meta.persistent_tiles and len(args) == len(fn.arg_names):
        # CTAs for half the programs, so that each runs its loop over tiles about twice (stream-K:
        # one more, so that the tiles do not divide evenly and the last ones are shared out)
        ctas = -(-math.prod(grid) // 2) + (1 if fn.meta.stream_k else 0)
        grid, args = backends.launch_geometry(1, grid, args, ctas, tiles=True, workspace=workspace(fn))
    elif fn.meta.persistent and len(args) == len(fn.arg_names):
        # CTAs for half the programs along axis 0, so that each runs its loop (and prefetch) twice
        grid, args = backends.launch_geometry(1, grid, args, -(-grid[0] // 2) * math.prod(grid[1:]))
    Machine(fn, grid + (1,) * (3 - len(grid)), bind_params(fn, list(args)), race_check).run()
    if fn.meta.stream_k:
        counters = np.asarray(args[len(fn.arg_names) + 3])[:2 * grid[0]]
        if counters.any():
            raise EmulatorError(f"kernel '{fn.name}': stream-K arrival counters left at "
                                f"{counters[counters != 0].tolist()} (each tile's last piece resets its own)")


def workspace(fn: ir.Function):
    """A stream-K kernel's workspace maker for ``launch_geometry`` (zeros: host memory), or None."""
    if not fn.meta.stream_k:
        return None
    return lambda ctas: np.zeros(abi.workspace_words(fn.meta.stream_k, ctas), np.float32)


class EmulatedKernel:
    """The ``emulate`` artifact: the SIMT function plus its text for ``kernel.inspect``."""

    def __init__(self, fn: ir.Function):
        self.fn = fn
        self.simt_ir = ir.print_function(fn)
        self.shared_bytes = fn.meta.shared_bytes
        self.programs_per_cta = fn.meta.programs_per_cta
        self.persistent = fn.meta.persistent
        self.persistent_tiles = fn.meta.persistent_tiles
        self.stream_k = fn.meta.stream_k
        self.copy_engines = simt.copy_engines(fn)
        self.producer_warps = fn.meta.producer_warps
        self.cluster_ctas = fn.meta.cluster_ctas
        self.paired_ctas = fn.meta.paired_ctas
        self.writes = tuple(fn.meta.writes)     # runtime arguments it stores to


class EmulateBackend:
    name = "emulate"
    target = "emulate"

    def compile(self, tile_fn: ir.Function, options: dict) -> EmulatedKernel:
        from tilejit.backends import switch_options
        from tilejit.backends.resources import check_resources
        from tilejit.passes.pipeline import compile_to_simt
        fn = compile_to_simt(tile_fn, num_warps=options.get("num_warps", 4), **switch_options(options))
        check_resources(fn, "sm_90a")         # what the largest target holds: the GPU would refuse the rest
        return EmulatedKernel(fn)

    def launch(self, artifact: EmulatedKernel, grid, args: list, stream=None) -> None:
        if artifact.fn.meta.persistent or artifact.fn.meta.persistent_tiles:
            run(artifact.fn, grid, args)
        else:
            run(artifact.fn, *backends.launch_geometry(artifact.fn.meta.programs_per_cta, tuple(grid), args))


backends.register("emulate", EmulateBackend())
