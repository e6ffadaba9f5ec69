"""The ``cuda`` backend: tile IR -> passes -> SIMT IR -> LLVM -> PTX -> cubin, kept in the on-disk
cache, loaded per device and launched through ``tilejit.runtime``.

The stages are data (``STAGES``): each takes the artifacts so far and adds one; ``compile`` runs
them in order, so a reader finds the whole GPU path here and a user can dump any stage.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tilejit.abi import ParamDesc, ParamKind
from tilejit import backends, dtypes
from tilejit.errors import Loc

# A cache hit reads an artifact and launches it: the compiler's modules (tilejit.simt, the passes
# that backends.resources imports) are imported by the stages that use them, not here.

_CACHE_FILES = ("ptx", "cubin", "llvm_ir", "simt_ir")


@dataclass
class CudaArtifact:
    """Everything the runtime needs to launch one specialisation, plus each stage's text."""
    name: str
    params: list[ParamDesc]
    writes: tuple[int, ...]
    num_warps: int
    shared_bytes: int
    ptx: str
    cubin: bytes | None = None
    llvm_ir: str | None = None
    simt_ir: str | None = None
    registers: int | None = None
    spills: int | None = None
    programs_per_cta: int = 1              # programs along grid axis 0 per CTA (pack_programs)
    asserts: tuple = ()                    # (message, scalar, rank, Loc) of each tj.device_assert, by number
    cta_threads: int = 0                   # threads per CTA (0: 32 * num_warps * programs_per_cta)
    persistent: bool = False               # each CTA loops over programs (persist_programs)
    copy_engines: tuple = ()               # how its pipelined loops fill their rings (simt.copy_engines)
    producer_warps: int = 0                # a warpgroup that only issues TMA copies (specialise_warps)
    cluster_ctas: int = 1                  # CTAs per program, launched as a cluster along x (cluster_rows)
    persistent_tiles: bool = False         # each CTA loops over the whole grid (specialise_warps)
    stream_k: int = 0                      # words of a stream-K workspace slot (0: none; passes/stream_k.py)
    paired_ctas: bool = False              # clusters of 2 CTAs, one program each (launch_geometry's paired)
    dependent_launch: bool = False         # launched with programmatic stream serialization (it waits: tj.wait_prior_kernels)
    scalar_dots: tuple = ()                # (Loc, why) of each tensor-core-typed tj.dot left on FMA (a warning)

    def __post_init__(self):
        if not self.cta_threads:
            self.cta_threads = 32 * self.num_warps * self.programs_per_cta
    loaded: dict = field(default_factory=dict, repr=False)   # device -> LoadedKernel
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    workspaces: dict = field(default_factory=dict, repr=False)   # device -> its stream-K workspace

    def workspace(self, device: int):
        """None, or (for a stream-K kernel) ``launch_geometry``'s maker of its workspace on
        ``device``: one zeroed float32 buffer kept for the kernel's lifetime (each launch leaves
        its counters at zero), grown when a launch runs more CTAs.  Launches of one kernel on two
        streams at once would share it: they are ordered on one stream."""
        if not self.stream_k:
            return None

        def make(ctas: int):
            import numpy as np

            from tilejit.abi import workspace_words
            from tilejit.runtime import arrays
            words = workspace_words(self.stream_k, ctas)
            with self.lock:
                buf = self.workspaces.get(device)
                if buf is None or buf.size < words:
                    buf = arrays.DeviceArray((words,), "float32", device=device)
                    buf.copy_from_host(np.zeros(words, np.float32))
                    self.workspaces[device] = buf
            return buf
        return make

    def kernel_for_device(self, device: int):
        loaded = self.loaded.get(device)
        if loaded is None:
            from tilejit.runtime import launch
            with self.lock:
                loaded = self.loaded.get(device)
                if loaded is None:
                    loaded = self._load(launch, device)
                    if self.dependent_launch:       # (LoadedKernel's default is False)
                        loaded.dependent_launch = True
                    self.loaded[device] = loaded
        return loaded

    def _load(self, launch, device: int):
        """The cubin, else the PTX, loaded on ``device``.  A cubin the driver refuses (made by a
        CUDA toolkit's ptxas newer than the driver) falls back to the driver JIT-compiling the
        PTX; the driver's words on the cubin join the error if that fails too."""
        from tilejit.errors import DeviceError
        if not self.cubin:
            return launch.load(self.ptx.encode(), self.name, self.shared_bytes, device)
        try:
            return launch.load(self.cubin, self.name, self.shared_bytes, device)
        except DeviceError as refused:
            try:
                return launch.load(self.ptx.encode(), self.name, self.shared_bytes, device)
            except DeviceError as e:
                raise DeviceError(f"{e.message}\n(the cubin was refused first: {refused.message})",
                                  kernel=self.name) from None

    def registers_per_thread(self) -> int | None:
        """Registers per thread: ptxas's report, else (the driver JIT-compiled the PTX, or a cache
        entry lacks the report) the loaded function's attribute, read once on the current device;
        None without a device."""
        if not self.registers:
            from tilejit.runtime import driver
            if driver.available():
                self.registers = self.kernel_for_device(driver.current_device()).num_regs or None
        return self.registers

    # --- (de)serialisation for the disk cache ----------------------------------------------------
    def files(self) -> dict[str, bytes]:
        out = {"ptx": self.ptx.encode(), "llvm_ir": (self.llvm_ir or "").encode(),
               "simt_ir": (self.simt_ir or "").encode()}
        if self.cubin:
            out["cubin"] = self.cubin
        return out

    def meta(self) -> dict:
        return {"name": self.name, "writes": list(self.writes), "num_warps": self.num_warps,
                "shared_bytes": self.shared_bytes, "registers": self.registers, "spills": self.spills,
                "programs_per_cta": self.programs_per_cta, "cta_threads": self.cta_threads,
                "persistent": self.persistent, "copy_engines": list(self.copy_engines),
                "producer_warps": self.producer_warps, "cluster_ctas": self.cluster_ctas,
                "persistent_tiles": self.persistent_tiles, "stream_k": self.stream_k, "paired_ctas": self.paired_ctas,
                "dependent_launch": self.dependent_launch,
                "scalar_dots": [[loc.file, loc.line, loc.col, loc.end_col, loc.func, why] for loc, why in self.scalar_dots],
                "asserts": [[m, s, r, loc.file, loc.line, loc.col, loc.end_col, loc.func] for m, s, r, loc in self.asserts],
                "params": [[p.kind.value, p.arg, p.axis, p.dtype.name, list(p.box), p.swizzle] for p in self.params]}

    @classmethod
    def from_cache(cls, files: dict[str, bytes], meta: dict) -> "CudaArtifact":
        params = [ParamDesc(k, a, ax, dtypes.BY_NAME[d], *rest) for k, a, ax, d, *rest in meta["params"]]
        return cls(meta["name"], params, tuple(meta["writes"]), meta["num_warps"], meta["shared_bytes"],
                   files["ptx"].decode(), files.get("cubin"), files["llvm_ir"].decode(),
                   files["simt_ir"].decode(), meta.get("registers"), meta.get("spills"),
                   int(meta.get("programs_per_cta", 1)),
                   tuple((m, bool(s), int(r), Loc(f, ln, c, e, fn)) for m, s, r, f, ln, c, e, fn in meta.get("asserts", ())),
                   int(meta.get("cta_threads", 0)), bool(meta.get("persistent", False)),
                   tuple(meta.get("copy_engines", ())), int(meta.get("producer_warps", 0)),
                   int(meta.get("cluster_ctas", 1)), bool(meta.get("persistent_tiles", False)),
                   int(meta.get("stream_k", 0)), bool(meta.get("paired_ctas", False)),
                   bool(meta.get("dependent_launch", False)),
                   tuple((Loc(f, ln, c, e, fn), why) for f, ln, c, e, fn, why in meta.get("scalar_dots", ())))


# ------------------------------------------------------------------------------------------ stages
def check_resources(fn, target: str) -> None:
    """``backends.resources.check_resources`` (imported when a kernel is compiled)."""
    from tilejit.backends.resources import check_resources as check
    check(fn, target)


def stage_simt(state: dict) -> None:
    from tilejit import ir
    from tilejit.passes.pipeline import compile_to_simt
    fn = compile_to_simt(state["tile_fn"], num_warps=state["num_warps"], target=state["target"],
                         **state["switches"])
    check_resources(fn, state["target"])
    state["simt_fn"], state["simt_ir"] = fn, ir.print_function(fn)


def stage_llvm(state: dict) -> None:
    from tilejit import codegen
    state["llvm_ir"] = codegen.emit_llvm(state["simt_fn"], state["target"])
    state["kernel_name"] = codegen.kernel_name(state["simt_fn"])


def stage_ptx(state: dict) -> None:
    from tilejit import codegen
    state["ptx"] = codegen.ptx_from_llvm(state["llvm_ir"], state["target"])


def stage_cubin(state: dict) -> None:
    """Assemble with nvJitLink when it is installed; a kernel that moves registers between
    warpgroups (``setmaxnreg``) with the ``ptxas`` command, whole-program.  Without either (or
    where that command rejects the PTX: a toolkit older than the PTX ISA LLVM writes) the driver
    JIT-compiles the PTX when the kernel is loaded (uncached by tilejit, no spill report)."""
    from tilejit.codegen import ptxas
    whole = "setmaxnreg" in state["ptx"]
    if ptxas.available() and (not whole or ptxas.whole_program_available()):
        try:
            asm, state["llvm_ir"], state["ptx"] = assemble_hinted(state["simt_fn"], state["target"],
                                                                  state["llvm_ir"], state["ptx"], whole)
        except ptxas.PtxAssemblyError:
            if not whole:
                raise
        else:
            # a log without ptxas's "Used N registers" line (seen under compute-sanitizer's racecheck)
            # leaves registers unknown, never 0: registers_per_thread then asks the loaded function
            state["cubin"], state["registers"], state["spills"] = asm.cubin, asm.registers or None, asm.spills
            return
    # (nvJitLink compiles relocatable code, where ptxas ignores setmaxnreg (C7504): a
    # warp-specialised kernel is then JIT-compiled whole by the driver, which honours it)
    meta = state["simt_fn"].meta if "simt_fn" in state else None
    if meta and meta.ws_ctas_wishes:               # (nor a warp-specialised one: one CTA an SM)
        meta.ws_ctas_wishes = ()
    if meta and meta.min_ctas_fallbacks:           # no spill report to judge a wish by: the plain hint
        meta.min_ctas_per_sm, meta.min_ctas_fallbacks = meta.min_ctas_fallbacks[-1], ()
        stage_llvm(state)
        stage_ptx(state)


def assemble_hinted(fn, target: str, llvm_ir: str | None = None, ptx: str | None = None,
                    whole_program: bool = False):
    """nvJitLink's assembly of SIMT ``fn`` (and its LLVM IR and PTX, when given), and, while it
    spills, again with each of ``fn.meta.min_ctas_fallbacks`` as the occupancy hint (the
    pipeline's ``set_occupancy``: packed and long-row kernels wish for more CTAs per SM).  Keeps
    the first that does not spill (else the one that spills least; the later on a tie) and leaves
    its hint in ``fn.meta``.
    ``whole_program``: assemble with the ``ptxas`` command (``ptxas.assemble``).
    Returns (``ptxas.Assembled``, LLVM IR, PTX)."""
    from tilejit import codegen
    from tilejit.codegen import ptxas
    if ptx is None:
        llvm_ir = codegen.emit_llvm(fn, target)
        ptx = codegen.ptx_from_llvm(llvm_ir, target)
    if fn.meta.ws_ctas_wishes:
        wished = assemble_wished(fn, target, ptx)
        if wished is not None:
            return wished
    first = fn.meta.min_ctas_per_sm
    best = ptxas.assemble(ptx, target, whole_program=whole_program), first, ptx
    for hint in fn.meta.min_ctas_fallbacks:
        if not best[0].spills:
            break
        fn.meta.min_ctas_per_sm = hint
        again = ptxas.with_min_ctas(ptx, hint) or codegen.ptx_from_llvm(codegen.emit_llvm(fn, target), target)
        asm = ptxas.assemble(again, target, whole_program=whole_program)
        if asm.spills <= best[0].spills:
            best = asm, hint, again
    asm, fn.meta.min_ctas_per_sm, ptx = best
    if fn.meta.min_ctas_per_sm != first:        # (only the hint changed: the PTX was edited, not remade)
        llvm_ir = codegen.emit_llvm(fn, target)
    return asm, llvm_ir, ptx


def assemble_wished(fn, target: str, ptx: str):
    """A warp-specialised kernel built for one CTA an SM, assembled for each of its wishes in turn
    (``meta.ws_ctas_wishes``: more CTAs, each the register file's share, ``specialise_warps.
    ctas_per_sm``): the first that ptxas neither refuses nor spills, as (``ptxas.Assembled``,
    LLVM IR, PTX) with ``fn`` set for it; else None, ``fn`` back at one CTA.  The wishes are
    spent either way.  A wish whose PTX moves registers between warpgroups is assembled
    whole-program (skipped without the ``ptxas`` command)."""
    from tilejit import codegen
    from tilejit.codegen import ptxas
    from tilejit.passes.specialise_warps import ctas_per_sm
    wishes, fn.meta.ws_ctas_wishes = fn.meta.ws_ctas_wishes, ()
    one = _register_counts(fn)
    for ctas in wishes:
        ctas_per_sm(fn, ctas)
        counts = _register_counts(fn)
        edited = ptxas.with_registers(ptx, *counts) if None not in counts and None not in one else None
        again = edited or codegen.ptx_from_llvm(codegen.emit_llvm(fn, target), target)
        whole = "setmaxnreg" in again
        if whole and not ptxas.whole_program_available():
            continue
        try:
            asm = ptxas.assemble(again, target, whole_program=whole)
        except ptxas.PtxAssemblyError:
            continue                  # (ptxas: "Insufficient registers" for some instruction)
        if not asm.spills:
            return asm, codegen.emit_llvm(fn, target), again
    ctas_per_sm(fn, 1)
    return None


def _register_counts(fn) -> tuple:
    """(``meta.max_registers``, the consumers' setmaxnreg.inc, the producer's .dec) of a
    warp-specialised SIMT ``fn``, None for each it lacks."""
    from tilejit.simt import SimtOp
    counts = {o.attrs.inc: o.attrs.n for o in fn.walk() if o.op is SimtOp.SETMAXNREG}
    return fn.meta.max_registers or None, counts.get(True), counts.get(False)


STAGES = {"simt": stage_simt, "llvm": stage_llvm, "ptx": stage_ptx, "cubin": stage_cubin}


def build(tile_fn, num_warps: int, target: str, stop_after: str | None = None, **switches) -> dict:
    """Run the stages in order on one tile-IR function; returns every artifact made.
    ``switches`` are ``compile_to_simt``'s keyword options (``wgmma``, ``verify``)."""
    state = {"tile_fn": tile_fn, "num_warps": num_warps, "target": target, "switches": switches}
    for name, stage in STAGES.items():
        stage(state)
        if name == stop_after:
            break
    return state


# ----------------------------------------------------------------------------------------- backend
class CudaBackend:
    """Compiles for the current device's architecture and launches through tilejit.runtime."""

    def available(self) -> bool:
        from tilejit.runtime import driver
        return driver.available()

    @property
    def target(self) -> str:
        from tilejit.runtime import driver
        if not driver.available():
            return "sm_90a"
        target = driver.device_properties(driver.current_device()).target
        return target if target in ("sm_80", "sm_90a") else "sm_80"

    def cache_key(self, pyfn, specs, constexprs: dict, num_warps: int, switches: dict | None = None) -> str:
        from tilejit import fingerprint
        from tilejit.runtime import driver
        version = driver.device_properties(driver.current_device()).driver_version if driver.available() else 0
        return fingerprint.cache_key(fingerprint.kernel_fingerprint(pyfn), list(specs), constexprs,
                                     num_warps, self.target, version, switches)

    def lookup(self, key: str) -> CudaArtifact | None:
        """The artifact in the on-disk cache under ``key`` (None: compile it)."""
        from tilejit.runtime import cache
        hit = cache.get(key)
        if not hit:
            return None
        try:
            return CudaArtifact.from_cache(*hit)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            import warnings        # an entry another tilejit wrote: its meta has other fields
            warnings.warn(f"tilejit: cache entry {key[:16]}... does not describe a kernel this tilejit "
                          f"can load ({type(e).__name__}: {e}); recompiling", stacklevel=2)
            return None

    def compile(self, tile_fn, options: dict) -> CudaArtifact:
        from tilejit import simt
        from tilejit.simt import assert_sites, copy_engines
        state = build(tile_fn, options["num_warps"], self.target, **backends.switch_options(options))
        simt_fn = state["simt_fn"]
        art = CudaArtifact(state["kernel_name"], list(simt_fn.meta.params), tuple(simt_fn.meta.writes),
                           simt_fn.meta.num_warps, simt_fn.meta.shared_bytes, state["ptx"],
                           state.get("cubin"), state["llvm_ir"], state["simt_ir"],
                           state.get("registers"), state.get("spills"), simt_fn.meta.programs_per_cta,
                           tuple((o.attrs.msg, o.attrs.scalar, o.attrs.rank, o.loc) for o in assert_sites(simt_fn)),
                           simt_fn.meta.cta_threads, simt_fn.meta.persistent, copy_engines(simt_fn),
                           simt_fn.meta.producer_warps, simt_fn.meta.cluster_ctas, simt_fn.meta.persistent_tiles,
                           simt_fn.meta.stream_k, simt_fn.meta.paired_ctas,
                           self.target != "sm_80" and simt.waits_on_prior_kernels(simt_fn),
                           simt_fn.meta.scalar_dots)
        if options.get("cache_key"):
            from tilejit.runtime import cache
            cache.put(options["cache_key"], art.files(), art.meta())
        return art

    def fast_launcher(self, art: CudaArtifact):
        """A launch function for re-launches whose array arguments are already device views
        (``Kernel`` has checked devices and specs on the first launch); None without arrays."""
        arrays = [p.arg for p in art.params if p.kind is ParamKind.PTR]
        if not arrays or art.asserts:     # asserts are checked after every launch: the full path
            return None
        threads, params, programs = art.cta_threads, art.params, art.programs_per_cta

        def geometry(grid, views):
            """The CTA grid and the kernel arguments of a launch of ``grid`` programs."""
            if art.persistent or art.persistent_tiles:
                device = views[arrays[0]].device
                kernel = art.kernel_for_device(device)
                return backends.launch_geometry(programs, grid, views, kernel.resident_ctas(threads),
                                                tiles=art.persistent_tiles, workspace=art.workspace(device))
            if programs > 1 or art.cluster_ctas > 1:
                return backends.launch_geometry(programs, grid, views, cluster=art.cluster_ctas,
                                                paired=art.paired_ctas)
            return grid, views

        def run(grid, views, stream):
            grid, views = geometry(grid, views)
            if stream is None:      # the full path's rule: the first array that has a stream
                for i in arrays:
                    stream = views[i].stream
                    if stream is not None:
                        break
            art.kernel_for_device(views[arrays[0]].device).launch(grid, threads, views, params, stream)

        def native(grid, args, views, kwargs, num_warps, env, staleness):
            """runtime/native.py's launcher repeating this launch (None where it cannot): the
            geometry (a persistent kernel's CTAs, a cluster's, the appended grid extents) is
            fixed for the launcher's grid and device."""
            if art.stream_k:
                return None                 # its workspace grows with the CTAs it runs
            from tilejit.runtime import launch, native as native_launch
            kernel = art.kernel_for_device(views[arrays[0]].device)
            if kernel._launch_fn is not launch._driver_launch:
                return None                 # a launch function of a test's: it must see every launch
            cta_grid, full = geometry(grid, list(views))
            return native_launch.launcher(kernel, params, cta_grid, threads, args, kwargs, num_warps, env,
                                          staleness, full[len(views):], views)
        run.native = native
        return run

    def launch(self, art: CudaArtifact, grid, args, stream) -> None:
        from tilejit.runtime import launch

        def geometry(kernel, grid, views):      # on the device the arrays live on
            resident = kernel.resident_ctas(art.cta_threads) if art.persistent or art.persistent_tiles else None
            return backends.launch_geometry(art.programs_per_cta, tuple(grid), views, resident, art.cluster_ctas,
                                            art.persistent_tiles, art.workspace(kernel.device) if art.stream_k else None,
                                            art.paired_ctas)
        launch.launch_arrays(art.kernel_for_device, grid, art.cta_threads, args,
                             art.params, art.writes, stream, geometry=geometry)
        if art.asserts:
            check_asserts(art)


def check_asserts(art: CudaArtifact) -> None:
    """DeviceAssertError for the first failed ``tj.device_assert`` the launch recorded (the
    record lives in the loaded module; it is cleared, so the context stays usable)."""
    from tilejit import ir
    from tilejit.errors import DeviceAssertError
    from tilejit.runtime import launch
    for loaded in list(art.loaded.values()):
        words = launch.take_assert_record(loaded)
        if words is None:
            continue
        msg, scalar, rank, loc = art.asserts[words[0] - 1]
        index = () if scalar else tuple(words[4:4 + min(rank, len(words) - 4)])
        raise DeviceAssertError(ir.assert_message(words[1:4], index, msg), loc)


backends.register("cuda", CudaBackend())
