"""The emulator's tensor-core, async-copy, TMA, mbarrier and warp-specialisation ops, as a
mixin of ``emulate.Machine`` (which holds the state they read: ``shared``, ``copies``,
``mbarriers``, ``wgmma_open``/``wgmma_groups`` and the race trackers).  Tensor-core ops and async
copies run through ``emulate_mma`` (the PTX fragment maps) and ``emulate_tma`` (tensor maps and
mbarrier phases); an async copy writes shared memory only when its wait retires it, and reading
bytes a copy still has in flight is an error."""
from __future__ import annotations

import threading

import numpy as np

from tilejit.backends import emulate_mma, emulate_tma
from tilejit.backends.emulate_frame import FENCED, WARP, EmulatorError, Frame, uniform


class AsyncOps:
    """``op_*`` methods for LDMATRIX, MMA, WGMMA*, PACK, CP_ASYNC*, MBARRIER_*, TMA_LOAD,
    SETMAXNREG and the warp-specialised split (``run_split``)."""

    # --- tensor cores and async copies ---------------------------------------------------------------
    def check_landed(self, o, rows, addr) -> None:
        """Reading shared bytes that an async copy has not written yet is undefined behaviour."""
        if self.mbarriers.bars and self.mbarriers.pending[rows, addr].any():
            raise EmulatorError(f"{o.op.name} reads shared bytes a TMA copy has not landed "
                                f"(a missing MBARRIER_WAIT)")
        if self.copies.groups or self.copies.uncommitted:
            if self.copies.pending_mask(self.shared)[rows, addr].any():
                raise EmulatorError(f"{o.op.name} reads shared bytes an async copy has not landed "
                                    f"(a missing or too-weak CP_ASYNC_WAIT)")

    def op_LDMATRIX(self, o, f):
        num = o.attrs.num
        addr = f[o.operands[0]][:, :, 0].astype(np.int64)
        lanes = (self.tid % WARP) < 8 * num          # the lanes whose row address is used
        rows16 = addr[:, lanes][:, :, None] + np.arange(16)
        ctas = np.broadcast_to(f.ids[:, None, None], rows16.shape)
        if rows16.min() < 0 or rows16.max() >= self.shared_bytes:
            raise EmulatorError("LDMATRIX: row address out of range")
        self.check_landed(o, ctas, rows16)
        readers = np.broadcast_to(self.tid[lanes][None, :, None], rows16.shape)
        if self.race_check:
            seen = self.writer[ctas, rows16]
            if ((seen != -1) & (seen != readers)).any():
                raise EmulatorError("shared-memory race: LDMATRIX reads bytes written by another "
                                    "thread since the last BARRIER")
            self.reader[ctas, rows16] = readers
        self.consumer_touch(ctas, rows16)
        regs = emulate_mma.ldmatrix(self.shared[f.ids], addr, num, o.attrs.trans)
        return np.ascontiguousarray(regs).view(np.int32)

    def op_MMA(self, o, f):
        a, b, c = (f[x] for x in o.operands)
        d = emulate_mma.mma(a, b, c, o.attrs.kind)
        return d.astype(o.result.type.dtype.np)

    def op_WGMMA(self, o, f):
        """Computed at issue; the bytes it reads stay *in flight* (the hardware may read them
        any time) until a WGMMA_WAIT retires its group: writing them before that is a race.
        A guard (a 4th operand) must be uniform over each warpgroup; where it is false the wgmma
        reads nothing and its accumulators become NaN (undefined: reading them is a bug)."""
        acc, a, b = (f[x] for x in o.operands[:3])
        n = o.attrs.n
        B, A = emulate_mma.ML.Operand.B, emulate_mma.ML.Operand.A
        on = np.ones((len(f.ids), self.threads), bool)
        if len(o.operands) > 3:
            on = f[o.operands[3]][:, :, 0].astype(bool)
            groups = on.reshape(len(f.ids), -1, emulate_mma.WARPGROUP)
            if (groups != groups[:, :, :1]).any():
                raise EmulatorError("WGMMA: its guard differs within a warpgroup")
        for v, operand in ((b, B),) if o.attrs.a_regs else ((a, A), (b, B)):
            for c, cta in enumerate(f.ids):
                for first in range(0, self.threads, emulate_mma.WARPGROUP):
                    if not on[c, first]:
                        continue
                    addrs = emulate_mma.wgmma_operand_addresses(int(v[c, first, 0]), o.attrs, operand, n)
                    self.check_landed(o, np.full(addrs.shape, cta), addrs)
                    read = np.unique(addrs.ravel()[:, None] + np.arange(emulate_mma.wgmma_item(o.attrs)))
                    if self.race_check:     # any store since the last BARRIER (and fence) is a race
                        if (self.writer[cta, read] != -1).any():
                            raise EmulatorError("shared-memory race: WGMMA reads bytes written since the "
                                                "last BARRIER")
                        self.check_fenced(o, cta, read)
                        self.reader[cta, read] = first
                    self.consumer_touch(cta, read)
                    self.wgmma_open.append((int(cta), read))
        out = emulate_mma.wgmma(self.shared[f.ids], a if o.attrs.a_regs else a[:, :, 0], b[:, :, 0],
                                acc, o.attrs)
        return out if on.all() else np.where(on[:, :, None], out, np.float32(np.nan)).astype(out.dtype)

    def op_WGMMA_COMMIT(self, o, f):
        self.wgmma_groups.append(self.wgmma_open)
        self.wgmma_open = []

    def op_WGMMA_WAIT(self, o, f):
        del self.wgmma_groups[:max(0, len(self.wgmma_groups) - o.attrs.n)]
        for a, r in zip(o.operands, o.results):
            f[r] = f[a]
        return f[o.operands[0]] if len(o.results) == 1 else None      # (block() stores a lone result)

    def check_wgmma_reads(self, o, f, addr: np.ndarray) -> None:
        """``addr`` (ctas of ``f``, ...) byte addresses ``o`` writes must not be read by a wgmma
        still in flight (a missing or too-weak WGMMA_WAIT, or a ring slot reused too soon)."""
        for group in self.wgmma_groups + [self.wgmma_open]:
            for cta, read in group:
                rows = np.nonzero(f.ids == cta)[0]
                if len(rows) and np.isin(addr[rows], read).any():
                    raise EmulatorError(f"shared-memory race: {o.op.name} writes bytes an in-flight "
                                        f"WGMMA reads (before the WGMMA_WAIT that retires it)")

    def op_WGMMA_FENCE(self, o, f):          # ordering only: the emulator runs wgmma in program order
        pass

    def op_FENCE_PROXY_ASYNC(self, o, f):
        """This side's threads' ordinary stores become visible to the async proxy at the next
        barrier (``unfenced``)."""
        if self.race_check:
            seen = self.unfenced[f.ids]
            seen[np.isin(seen, self.tid)] = FENCED
            self.unfenced[f.ids] = seen

    def check_fenced(self, o, cta, read) -> None:
        """The async proxy (``o``: a WGMMA or TMA_STORE) reads shared bytes ``read`` of ``cta``:
        a thread's store to them must be followed by its proxy fence and then a barrier."""
        if self.race_check and (self.unfenced[cta, read] != -1).any():
            raise EmulatorError(f"shared-memory race: {o.op.name} (the async proxy) reads bytes that threads "
                                f"stored without a FENCE_PROXY_ASYNC and then a BARRIER after the store: "
                                f"the tensor cores or the copy engine may read stale bytes")

    def op_PACK(self, o, f):
        x = f[o.operands[0]]
        bits = o.operands[0].type.dtype.bits
        raw = np.ascontiguousarray(x).view(np.dtype(f"uint{bits}")).astype(np.uint32)
        per = 32 // bits
        raw = raw.reshape(raw.shape[:2] + (-1, per)) << (np.arange(per, dtype=np.uint32) * bits)
        return np.bitwise_or.reduce(raw, axis=-1).view(np.int32)

    def op_UNPACK(self, o, f):
        x = np.ascontiguousarray(f[o.operands[0]]).view(np.uint32)
        dt = o.result.type.dtype
        per = 32 // dt.bits
        parts = (x[..., None] >> (np.arange(per, dtype=np.uint32) * dt.bits)) & np.uint32((1 << dt.bits) - 1)
        raw = parts.reshape(x.shape[:-1] + (-1,)).astype(np.dtype(f"uint{dt.bits}"))
        return raw.view(dt.np)

    def op_CP_ASYNC(self, o, f):
        ptr = f[o.operands[0]]
        offs, addr, src = (f[x] for x in o.operands[1:4])
        issue = f[o.operands[4]][:, :, 0].astype(bool) if len(o.operands) == 5 else None
        if self.wgmma_groups or self.wgmma_open:
            self.check_wgmma_reads(o, f, addr.astype(np.int64)[..., None] + np.arange(16))
        if self.race_check:                   # the copy may land any time from now on
            bytes_ = addr.astype(np.int64)[..., None] + np.arange(16)
            rows = np.broadcast_to(f.ids[:, None, None, None], bytes_.shape)
            tid = np.broadcast_to(self.tid[None, :, None, None], bytes_.shape)
            if issue is not None:           # only the threads that issue copy anything
                bytes_, rows, tid = bytes_[issue], rows[issue], tid[issue]
            for track, what in ((self.reader, "read by"), (self.writer, "written by")):
                seen = track[rows, bytes_]
                if ((seen != -1) & (seen != tid)).any():
                    raise EmulatorError(f"shared-memory race: CP_ASYNC overwrites bytes {what} "
                                        f"another thread since the last BARRIER")
            # two threads copying into the same bytes (replicas of a layout): which lands last
            # is undefined, and compute-sanitizer's racecheck reports it
            key = (rows * self.shared.shape[1] + bytes_).ravel()
            order = np.argsort(key, kind="stable")
            key, who = key[order], tid.ravel()[order]
            if ((key[1:] == key[:-1]) & (who[1:] != who[:-1])).any():
                raise EmulatorError("shared-memory race: two threads of one CP_ASYNC copy into the "
                                    "same bytes")
        ctas = len(self.block_ids)
        for i in range(addr.shape[2]):
            full = [np.zeros((ctas, self.threads), np.int64) for _ in range(3)]
            active = np.zeros((ctas, self.threads), bool)
            active[f.ids] = True if issue is None else issue
            for dst, v in zip(full, (addr[:, :, i], offs[:, :, i], src[:, :, i])):
                dst[f.ids] = v
            goff = (full[1] + ptr.base) * ptr.item
            reading = active & (full[2] > 0)
            self.before_wait(ptr, (full[1] + ptr.base)[reading], "copies (cp.async) from")
            # every issued copy, zero-filling ones too: the PTX ISA's alignment rule for cp.async
            # operands does not depend on src-size
            if ((ptr.address + full[1] * ptr.item) % 16 != 0)[active].any():
                raise EmulatorError(f"cp.async from argument '{ptr.name}' at an address that is not "
                                    "16-byte aligned (the hardware requires it)")
            self.copies.cp_async(self.shared, full[0], ptr.flat, np.where(full[2] > 0, goff, 0),
                                 full[2], active)

    def op_CP_ASYNC_COMMIT(self, o, f):
        self.copies.commit_group()

    def op_CP_ASYNC_WAIT(self, o, f):
        # every CTA of the batch shares one queue: a CTA group split off by divergent control flow
        # may see its copies land early (never late), which is still a legal schedule
        for mem, smem in self.copies.wait_group(o.attrs.n):
            cta, thread = np.nonzero(smem >= 0)
            if self.race_check:
                self.writer[cta[:, None], smem[cta, thread][:, None] + np.arange(16)] = thread[:, None]
                self.unfenced[cta[:, None], smem[cta, thread][:, None] + np.arange(16)] = thread[:, None]

    # --- TMA and mbarriers (emulate_tma) ----------------------------------------------------------
    def issuers(self, o, f, operand: int):
        """(batch row, thread) of the one thread per CTA of ``f`` whose ``issue`` holds."""
        issue = f[o.operands[operand]][:, :, 0].astype(bool)
        for c, row in enumerate(f.ids):
            who = np.nonzero(issue[c])[0]
            if len(who) > 1:
                raise EmulatorError(f"{o.op.name} is issued by {len(who)} threads of a CTA (one must issue it)")
            if len(who):
                yield c, int(row), int(who[0])

    def mbarrier_op(self, o, f, act) -> None:
        bar = f[o.operands[0]]
        try:
            for c, row, t in self.issuers(o, f, 1):
                act((row, int(bar[c, t, 0])))
        except emulate_tma.TmaError as e:
            raise EmulatorError(str(e)) from None

    def op_MBARRIER_INIT(self, o, f):
        self.mbarrier_op(o, f, lambda key: self.mbarriers.init(key, o.attrs.n))

    # --- the producer/consumer hand-off of a warp-specialised split (emulate_tma.ConsumerEpochs) ---
    def consumer_touch(self, rows, addr) -> None:
        """The consumer warps of a split read or write these shared bytes."""
        if self.baton is not None and self.side == 0:
            self.epochs.touch(rows, addr)

    def consumer_arrival(self, row: int) -> int:
        return self.epochs.arrive(row) if self.baton is not None and self.side == 0 else -1

    def op_MBARRIER_EXPECT_TX(self, o, f):
        self.mbarrier_op(o, f, lambda key: self.mbarriers.expect_tx(key, o.attrs.n))

    def op_MBARRIER_INVAL(self, o, f):
        self.mbarrier_op(o, f, self.mbarriers.inval)

    def op_MBARRIER_WAIT(self, o, f):
        bar = uniform(f[o.operands[0]], "an mbarrier address")
        parity = uniform(f[o.operands[1]], "an mbarrier parity")
        keys = [((int(row), int(b)), int(p)) for row, b, p in zip(f.ids, bar, parity)]
        try:
            while self.baton is not None and not all(self.mbarriers.ready(k, p) for k, p in keys):
                side = self.side
                moved = self.baton.pause(side)
                self.enter(side)
                if not moved:
                    break                             # the wait below reports the hang
            for k, p in keys:
                stamps = self.mbarriers.wait(k, p)
                if self.baton is not None and self.side == 1:
                    for row, stamp in stamps.items():
                        self.epochs.learn(row, stamp)
        except emulate_tma.TmaError as e:
            raise EmulatorError(str(e)) from None
        self.writer[f.ids] = -1                       # the phase orders what came before it
        self.reader[f.ids] = -1

    def cluster_row(self, row: int, rank: int) -> int:
        """The batch row of the CTA of rank ``rank`` in batch row ``row``'s cluster."""
        if not 0 <= rank < self.cluster:
            raise EmulatorError(f"cluster CTA rank {rank} in clusters of {self.cluster} CTAs")
        return row - int(self.block_ids[row, 0]) % self.cluster + rank

    def op_MBARRIER_ARRIVE(self, o, f):
        bar, on = f[o.operands[0]], f[o.operands[1]][:, :, 0].astype(bool)
        rank = f[o.operands[2]][:, :, 0] if len(o.operands) > 2 else None
        try:
            for c, row in enumerate(f.ids):
                who = np.nonzero(on[c])[0]
                if len(who):
                    target = int(row)
                    if rank is not None:
                        ranks = set(rank[c, who].tolist())
                        if len(ranks) > 1:
                            raise EmulatorError("MBARRIER_ARRIVE: the threads of a CTA arrive at different "
                                                "CTAs' mbarriers (the emulator wants one rank a CTA)")
                        target = self.cluster_row(int(row), ranks.pop())
                    self.mbarriers.arrive((target, int(bar[c, who[0], 0])), len(who),
                                          self.consumer_arrival(int(row)), int(row))
        except emulate_tma.TmaError as e:
            raise EmulatorError(str(e)) from None

    def op_SETMAXNREG(self, o, f):               # registers are not modelled
        pass

    # --- warp specialisation: two sides of the CTA at once ---------------------------------------------
    def enter(self, side: int) -> None:
        """Make ``side``'s threads the machine's (after taking the baton)."""
        self.side = side
        self.threads, self.tid = self.side_threads[side]

    def run_split(self, o, f):
        """An IF with SplitAttrs: its regions on the threads below and from ``attrs.threads``,
        interleaved at mbarrier waits (``emulate_tma.Baton``)."""
        if self.baton is not None:
            raise EmulatorError("a warp-specialised IF inside another")
        cut, whole = o.attrs.threads, (self.threads, self.tid)
        self.side_threads = [(cut, self.tid[:cut]), (self.threads - cut, self.tid[cut:])]
        frames = [Frame({k: (v[:, lo:hi] if isinstance(v, np.ndarray) and v.ndim == 3 else v)
                         for k, v in f.env.items()}, f.ids)
                  for lo, hi in ((0, cut), (cut, self.threads))]
        baton = self.baton = emulate_tma.Baton(self.mbarriers)
        errors = [None, None]

        def run(side):
            try:
                baton.acquire(side)
                self.enter(side)
                self.block(o.regions[side], frames[side])
                baton.finish(side)
            except emulate_tma._Abandoned:
                pass
            except BaseException as e:          # reported by the launching thread
                errors[side] = e
                baton.finish(side, failed=True)
        workers = [threading.Thread(target=run, args=(side,), daemon=True) for side in (0, 1)]
        try:
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        finally:
            self.baton = None
            self.threads, self.tid = whole
        for e in errors:
            if e is not None:
                raise e

    op_FENCE_MBARRIER_INIT = op_WGMMA_FENCE

    def box_bytes(self, o, tmap, start: int) -> np.ndarray:
        """The shared byte addresses of a TMA copy's box at ``start`` (swizzled), once its map
        and address are checked."""
        if not tmap.usable:
            raise EmulatorError(f"{o.op.name} through the tensor map of '{tmap.array.name}', which breaks TMA's "
                                f"rules (the runtime passes zeros): the kernel must not copy through it")
        if start % 128 or start < 0 or start + tmap.nbytes > self.shared_bytes:
            raise EmulatorError(f"{o.op.name}: shared address not 128-byte aligned or out of range")
        return emulate_tma.swizzle(start + np.arange(tmap.nbytes), tmap.desc.swizzle)

    def op_TMA_STORE(self, o, f):
        """Writes the array at issue; the shared bytes stay *being read* until the issuing
        thread's TMA_STORE_WAIT (``bulk_reads``): writing them before that is a race."""
        tmap, src = f[o.operands[0]], f[o.operands[1]]
        coords = [f[x] for x in o.operands[3:]]
        for c, row, t in self.issuers(o, f, 2):
            addrs = self.box_bytes(o, tmap, int(src[c, t, 0]))
            self.check_landed(o, np.full(addrs.shape, row), addrs)
            if self.race_check and (self.writer[row, addrs] != -1).any():
                raise EmulatorError("shared-memory race: TMA_STORE reads bytes written since the last BARRIER "
                                    "(and its proxy fence)")
            self.check_fenced(o, row, addrs)
            self.written = None              # (the boxes' elements are not tracked for the next launch)
            try:
                tmap.store_box(tuple(int(x[c, t, 0]) for x in coords), self.shared[row, addrs])
            except emulate_tma.TmaError as e:
                raise EmulatorError(str(e)) from None
            self.bulk_reads.append((row, addrs))

    def op_TMA_STORE_WAIT(self, o, f):
        done = {row for _, row, _ in self.issuers(o, f, 0)}
        self.bulk_reads = [(row, addrs) for row, addrs in self.bulk_reads if row not in done]

    def check_bulk_reads(self, o, rows, addr) -> None:
        """Writing shared bytes a TMA_STORE still reads (before its TMA_STORE_WAIT) is a race."""
        for row, read in self.bulk_reads:
            if np.isin(addr[rows == row], read).any():
                raise EmulatorError(f"shared-memory race: {o.op.name} writes bytes a TMA_STORE still reads "
                                    f"(before its TMA_STORE_WAIT)")

    def op_TMA_LOAD(self, o, f):
        tmap = f[o.operands[0]]
        dst, bar = f[o.operands[1]], f[o.operands[2]]
        coords = [f[x] for x in o.operands[4:]]
        mask = o.attrs.multicast
        for c, issuer, t in self.issuers(o, f, 3):
            addrs = self.box_bytes(o, tmap, int(dst[c, t, 0]))
            data = tmap.box(tuple(int(x[c, t, 0]) for x in coords))
            rows = [self.cluster_row(issuer, r) for r in range(self.cluster) if mask >> r & 1] if mask else [issuer]
            if mask >> self.cluster:
                raise EmulatorError(f"TMA_LOAD multicast to CTA mask {mask:#x} in clusters of {self.cluster} CTAs")
            for row in rows:
                self.tma_land(o, row, addrs, data, int(bar[c, t, 0]))

    def tma_land(self, o, row: int, addrs, data, bar: int) -> None:
        """One TMA_LOAD's box lands in batch row ``row``'s shared
        memory at ``addrs``, completing on its mbarrier at ``bar``."""
        cta = np.full(addrs.shape, row)
        if self.bulk_reads:
            self.check_bulk_reads(o, np.full(addrs.shape, row), addrs)
        if self.mbarriers.pending[row, addrs].any():
            raise EmulatorError("TMA_LOAD overwrites bytes of an earlier copy no thread has waited for "
                                "(a ring slot refilled before its consumers released it)")
        if self.wgmma_groups or self.wgmma_open:
            self.check_wgmma_reads(o, Frame({}, np.array([row])), addrs[None, None, :])
        if self.baton is not None and self.side == 1 and self.epochs.in_use(row, addrs):
            raise EmulatorError("shared-memory race: the producer's TMA_LOAD overwrites bytes the consumer "
                                "warps read or wrote after their last mbarrier arrival it waited for (shared "
                                "memory they use outside the ring, or a slot refilled before its release)")
        if self.race_check:              # the copy may land any time from now on
            for track, what in ((self.reader, "read by"), (self.writer, "written by")):
                seen = track[cta, addrs]
                if (seen != -1).any():
                    raise EmulatorError(f"shared-memory race: TMA_LOAD overwrites bytes {what} a thread "
                                        f"since the last BARRIER")
        self.shared[row, addrs] = data
        try:
            self.mbarriers.copy((row, bar), row, addrs, len(data))
        except emulate_tma.TmaError as e:
            raise EmulatorError(str(e)) from None
