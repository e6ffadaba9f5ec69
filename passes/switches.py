"""The compiler's module switches: the upper-case settings at the top of each pass and code
generator module, bools, numbers and tuples of ints (``tilejit.passes.multicast.MULTICAST``,
``tilejit.codegen.llvm.CODEGEN_OPT``, ``tilejit.passes.pipeline.DECODE_DOT_THREADS_PER_SM``),
which a probe or a user may set before compiling, as ``scripts/compile_sweep.py --set`` does.

A compile reads them where they are used, so both compile caches must know them: ``overrides()``
is the switches whose values differ from the defaults below, and it is part of the in-memory
compile key and of the on-disk cache key (the defaults themselves are in the compiler's source
fingerprint).  A module not imported yet holds its defaults, so ``overrides()`` reads only modules
in ``sys.modules`` and never imports one: a cache hit stays free of the compiler.  Worker
processes that compile autotuning configs get the parent's overrides with ``apply``.

``DEFAULTS`` must equal the modules' sources: a test parses them and compares.  A launch that
has been seen before takes the fast path, which does not read the switches; set them before a
kernel's first launch, or call ``tilejit.passes.switches.changed()`` after setting them later.
"""
from __future__ import annotations

import sys

DEFAULTS: dict[str, dict[str, bool | int | float | tuple]] = {
    "tilejit.passes.assign_layouts": {"CARRIED_ROUNDS": 3},
    "tilejit.passes.chunk_rows": {
        "CHUNK_VALUES": 16384, "PREFETCH": False, "ONLINE_SOFTMAX": False, "ONE_PASS_VARIANCE": True,
        "ELEMENTWISE_ACC": True, "COUNT_LOADS": True, "STASH": True, "STASH_BYTES": 131072,
        "STASH_SM_BYTES": 163840},
    "tilejit.passes.cluster_rows": {
        "MAX_CTAS": 8, "CLUSTER_BYTES": 131072, "ONE_LOAD": True, "ONE_EXCHANGE": True,
        "THREADS_PER_SM": 1024, "VALUES_PER_THREAD": 32},
    "tilejit.passes.coarsen_programs": {"COARSEN": 1},
    "tilejit.passes.fold_scale": {"FOLD": True},
    "tilejit.passes.fuse_fma": {"FUSE": True},
    "tilejit.passes.layouts": {"WARP_SIZE": 32},
    "tilejit.passes.lower": {"GROUP_PROGRAMS": 8},
    "tilejit.passes.mma_layouts": {
        "WARP_SIZE": 32, "BANKS": 32, "BANK_BYTES": 4, "LDMATRIX_ROW_BYTES": 16, "CHUNK": 16, "NIBBLE_BLOCK": 32},
    "tilejit.passes.mma_tiling": {"DEFAULT_STAGES": 3},
    "tilejit.passes.multicast": {"MULTICAST": False, "MULTICAST_COPIES": True},
    "tilejit.passes.nibble_operands": {"NIBBLE_B": True, "NIBBLE_ROWS": 32},
    "tilejit.passes.pack_programs": {"WARP": 32, "MAX_PROGRAMS": 15, "PACK_BYTES": 1024, "PACK_LOADED": 1024},
    "tilejit.passes.persist_programs": {
        "COPY": 16, "SLOT_BYTES": 98304, "PERSIST": True, "REREAD_OTHER": True},
    "tilejit.passes.pipeline": {
        "PACKED_THREADS_PER_SM": (2048, 1536), "ROW_THREADS_PER_SM": (2048, 1536), "PERSIST_THREADS_PER_SM": (),
        "ROW_MIN_THREADS": 512, "DECODE_DOT_THREADS_PER_SM": (640, 512, 384), "DECODE_DOT_ROWS": 16, "RING_MARGIN": 1024},
    "tilejit.passes.defer_products": {"DEFER": False, "MAX_VALUES": 200, "CARRY_FLOAT": False},
    "tilejit.passes.rotate_products": {"ROTATE": True, "ROTATE_GEMM": False, "ROTATE_MIN_N": 128, "ROTATE_MAX_N": 128},
    "tilejit.passes.plan_loops": {"PAIR_CTA_BYTES": 115712, "COMPUTED_B_RINGS": False},
    "tilejit.passes.plan_stores": {"TMA_STORES": False},
    "tilejit.passes.prefetch_loads": {
        "PREFETCH_ELEMENTS": 1024, "PREFETCH_AHEAD": 1, "PREFETCH_DEQUANTISED": True,
        "WGMMA_DEQUANTISED": True, "DEQUANTISED_ELEMENTS": 8192},
    "tilejit.passes.remat_indices": {"REMAT": True},
    "tilejit.passes.ring_sources": {"SMALL_LOAD": 16},
    "tilejit.passes.row_rings": {
        "ROW_RINGS": True, "ROW_RING_BYTES": 65536, "ROW_RING_STAGES": 4, "DOT_LOOP_ROW_RINGS": False,
        "DOT_LOOP_MIN_BYTES": 1024, "MAX_CARRIED": 3, "CTA_RESERVED": 1024, "OTHER_BYTES": 4096,
        "MAX_CTAS_PER_SM": 32, "RING_THREADS_PER_SM": 1536},
    "tilejit.passes.shared_memory": {"DEDICATED_BYTES": 512},
    "tilejit.passes.sink_transposes": {"SINK_TRANSPOSES": True},
    "tilejit.passes.specialise_warps": {
        "PRODUCER_WARPS": 4, "PRODUCER_REGISTERS": 40, "LEAN_PRODUCER_REGISTERS": 24, "REGISTER_FILE": 65536, "MAX_REGISTERS": 248,
        "SHARED_PER_SM": 233472, "CTA_SHARED_RESERVED": 1024, "CTAS_PER_SM": 3,
        "PERSIST_TILES": False, "PRIVATE_RINGS": False, "PINGPONG": False, "PINGPONG_PROMOTION": True,
        "ELECT_RELEASES": False, "PINGPONG_BARRIERS": (2, 3, 4)},
    "tilejit.passes.split_dot_loads": {"SPLIT_DOT_LOADS": True},
    "tilejit.passes.stream_k": {"STREAM_K": False, "CHUNK": 8},
    "tilejit.passes.swap_small_dots": {"MAX_ROWS": 32},
    "tilejit.passes.tma": {"ATOM_BYTES": 128, "MAX_BOX": 256, "SPANS": (32, 64, 128)},
    "tilejit.passes.warps": {
        "BYTES_PER_THREAD": 64, "WIDE_BYTES_PER_THREAD": 128, "VALUES_PER_THREAD": 64,
        "MAX_VALUES_PER_THREAD": 1024},
    "tilejit.passes.wgmma": {
        "ATOM_BYTES": 128, "K_STEP_BYTES": 32, "TRANSPOSED_A": True, "COMPUTED_B": True,
        "COMPUTED_B_BUFFERS": 2, "A_ROW_BYTES": (32, 64, 128), "UNROLL_AHEAD": False},
    "tilejit.codegen.base": {"FAST_DIVISION": True, "MAGIC_INT_TO_FLOAT": True},
    "tilejit.codegen.elementwise": {"POW2_DIVMOD": True},
    "tilejit.codegen.floatmath": {
        "SQRT_HALF_BITS": 1060439283,
        "TWO_OVER_PI_240": 1124809776187544279507997106716295999256865926021540629657413695461646011},
    "tilejit.codegen.llvm": {
        "CODEGEN_OPT": 2, "IR_OPT": 3, "DESCRIPTOR_OFFSETS": False, "PIN_PROMOTED": True, "ZERO_PRODUCTS": True,
        "SLP_VECTORIZE": True},
    "tilejit.codegen.memory": {"BRANCH_FREE_LOADS": False},
    "tilejit.codegen.mma": {"FP8_MIN_PTX": 84, "CLUSTER_SCOPE_RELEASE": False},
    "tilejit.codegen.nibbles": {"NIBBLE_PAIRS": True, "REGISTER_MASK": True},
    "tilejit.codegen.ptxas": {"LINE_INFO": True},
    "tilejit.codegen.trig64": {"TABLE_BITS": 1280},
    "tilejit.backends": {"STREAM_K_SPLIT": 4},
}

generation = 0          # bumped by ``changed``: a Kernel's fast-path launches then re-check


def overrides() -> tuple:
    """``(module.NAME, value)`` of each switch not at its default, in a fixed order."""
    out = []
    modules = sys.modules
    for name, defaults in DEFAULTS.items():
        module = modules.get(name)
        if module is None:              # not imported: its source's values, in the fingerprint
            continue
        values = module.__dict__
        for attr, default in defaults.items():
            value = values.get(attr, default)
            if value != default or type(value) is not type(default):
                out.append((f"{name}.{attr}", value))
    return tuple(out)


def apply(settings) -> None:
    """Set each ``(module.NAME, value)`` of ``settings`` (what ``overrides()`` returned), importing
    the module; an unknown name is an error."""
    import importlib
    for qualified, value in settings:
        name, _, attr = qualified.rpartition(".")
        if attr not in DEFAULTS.get(name, ()):
            raise KeyError(f"'{qualified}' is not a compiler switch (see tilejit.passes.switches.DEFAULTS)")
        setattr(importlib.import_module(name), attr, value)
    changed()


def changed() -> None:
    """Say that switches were set after kernels launched: their fast-path launchers re-check."""
    global generation
    generation += 1
