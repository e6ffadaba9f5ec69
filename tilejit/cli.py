"""The ``tilejit`` command: ``demo``, ``compile FILE::KERNEL --emit STAGE``, ``cache info|clear``,
``info`` (what this machine has for tilejit) and ``--version``."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
from pathlib import Path

from tilejit import backends, dtypes
from tilejit.errors import TilejitError
from tilejit.kernel import Kernel
from tilejit.specs import ArraySpec, NoneSpec, ScalarSpec

STAGES = {"tile": "tile_ir", "simt": "simt_ir", "llvm": "llvm_ir", "ptx": "ptx", "sass": "sass"}
_SHORT_DTYPES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16", "e4m3": "float8e4m3", "e5m2": "float8e5m2", "i8": "int8", "i16": "int16",
                 "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "i1": "bool"}
_SIG_ITEM = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*(?:\[\s*(\d+)\s*\]|(\+))?\s*$")


def parse_signature(text: str) -> list:
    """``"float16[2], float16[2], int32"`` -> specs: ``DTYPE[RANK]`` an array, ``DTYPE`` a scalar,
    ``DTYPE+`` a float scalar greater than zero (as a launch with ``0.125`` specialises it),
    ``None`` a parameter passed None."""
    specs = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if item == "None":
            specs.append(NoneSpec())
            continue
        match = _SIG_ITEM.match(item)
        if not match:
            raise ValueError(f"cannot read signature item {item!r} (write e.g. float16[2] or int32)")
        try:
            dt = dtypes.lookup(_SHORT_DTYPES.get(match[1], match[1]))
        except TypeError as err:
            raise ValueError(str(err)) from None
        if match[3] and not dt.is_float:
            raise ValueError(f"signature item {item!r}: only a float scalar is specialised as positive")
        specs.append(ScalarSpec(dt, bool(match[3])) if match[2] is None else ArraySpec(dt, int(match[2])))
    return specs


def parse_const(text: str) -> tuple[str, object]:
    """``NAME=VALUE``; VALUE is a Python literal or a dtype name (``float16``, ``tj.float16``)."""
    name, sep, raw = text.partition("=")
    if not sep:
        raise ValueError(f"--const wants NAME=VALUE, got {text!r}")
    try:
        return name.strip(), ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
        pass
    try:
        return name.strip(), dtypes.lookup(raw.strip())
    except TypeError:
        return name.strip(), raw.strip()


def load_kernel(target: str) -> Kernel:
    """``path/to/file.py::kernel_name`` -> the Kernel object (the file runs as a module, not main)."""
    path, sep, name = target.rpartition("::")
    if not sep:
        raise ValueError(f"expected FILE::KERNEL, got {target!r}")
    spec = importlib.util.spec_from_file_location(f"tilejit_cli_{Path(path).stem}", path)
    if spec is None:
        raise ValueError(f"cannot load {path!r}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = getattr(module, name, None)
    found = getattr(found, "kernel", found)          # an @tj.autotune wraps its Kernel
    if not isinstance(found, Kernel):
        kernels = sorted(n for n, v in vars(module).items() if isinstance(getattr(v, "kernel", v), Kernel))
        raise ValueError(f"{path} has no @tj.kernel named {name!r}; its kernels: {', '.join(kernels) or 'none'}")
    return found


def _pass_names() -> list[str]:
    from tilejit.passes.pipeline import PIPELINE
    return [stage.name for stage in PIPELINE]


def parse_switch(text: str) -> tuple[str, object]:
    """``"MODULE.NAME=VALUE"`` -> ``("tilejit.passes.MODULE.NAME", VALUE)``: a compiler switch
    (``tilejit.passes.switches.DEFAULTS``; the module by its full name or its last part) and a
    Python literal of the switch's type."""
    from tilejit.passes.switches import DEFAULTS
    target, sep, value = text.partition("=")
    name, _, attr = target.strip().rpartition(".")
    full = [m for m in DEFAULTS if m == name or m.rpartition(".")[2] == name]
    if not sep or len(full) != 1 or attr not in DEFAULTS[full[0]]:
        raise ValueError(f"--set {text!r}: expected MODULE.NAME=VALUE naming a compiler switch, e.g. "
                         "prefetch_loads.PREFETCH_AHEAD=2 (the switches: tilejit.passes.switches.DEFAULTS)")
    default = DEFAULTS[full[0]][attr]
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        parsed = None
    if type(parsed) is not type(default) and not (type(default) is float and type(parsed) is int):
        raise ValueError(f"--set {text!r}: {attr} takes a {type(default).__name__} like its default {default!r}")
    return f"{full[0]}.{attr}", parsed


def compile_command(args) -> int:
    settings = [parse_switch(s) for s in args.set]
    if settings:
        from tilejit.passes import switches
        switches.apply(settings)
    kern = load_kernel(args.target)
    consts = dict(parse_const(c) for c in args.const)
    for name in consts:
        if name not in kern.constexpr_names:
            raise ValueError(f"{name!r} is not a constexpr parameter of {kern.name} "
                             f"(those are: {', '.join(sorted(kern.constexpr_names)) or 'none'})")
    for p in kern.params:
        if p.name in kern.constexpr_names and p.name not in consts:
            if p.default is p.empty:
                raise ValueError(f"give the constexpr {p.name!r} with --const {p.name}=VALUE")
            consts[p.name] = p.default
    if args.sig is None:
        raise ValueError(f"give --sig with one item per runtime parameter ({', '.join(kern.runtime_names)}), "
                         f"e.g. --sig 'float32[2], int32'")
    specs = parse_signature(args.sig)
    if len(specs) != len(kern.runtime_names):
        raise ValueError(f"--sig has {len(specs)} items but {kern.name} has {len(kern.runtime_names)} "
                         f"runtime parameters ({', '.join(kern.runtime_names)})")
    consts = {p.name: consts[p.name] for p in kern.params if p.name in consts}
    if args.emit not in STAGES:                      # the IR right after one pass of the pipeline
        from tilejit.kernel import compile_switches, verify_switch
        from tilejit.passes.pipeline import compile_to_simt
        texts = {}
        tile_fn = kern.tile_ir(specs, consts)
        if args.num_warps is None:                   # what a launch without num_warps gets
            from tilejit.passes.warps import choose_num_warps
            args.num_warps = choose_num_warps(tile_fn, dict(compile_switches())["cluster"])   # (sm_90a)
        compile_to_simt(tile_fn, args.num_warps, args.arch or "sm_90a", dump=texts.__setitem__,
                        verify=verify_switch(), **dict(compile_switches()))
        print(texts[args.emit])
        return 0
    if args.arch:                                    # the cuda stages for a GPU this machine need not have
        return _print_for_arch(kern, specs, consts, args)
    found = kern.inspect_specs(specs, consts, args.num_warps, args.backend)
    text = getattr(found, STAGES[args.emit])
    if text is None:
        print(f"tilejit: the '{found.backend}' backend does not produce stage '{args.emit}' here "
              "(ptx and llvm come from cuda; cubin needs nvJitLink)", file=sys.stderr)
        return 2
    print(text)
    return 0


def _print_for_arch(kern, specs, consts, args) -> int:
    from tilejit.backends import cuda, switch_options
    from tilejit.kernel import compile_switches, verify_switch
    from tilejit.passes.warps import choose_num_warps
    tile_fn = kern.tile_ir(specs, consts)
    if args.emit == "tile":
        print(kern.inspect_specs(specs, consts, args.num_warps, "interpret").tile_ir)
        return 0
    switches = dict(compile_switches())
    num_warps = args.num_warps or choose_num_warps(tile_fn, switches["cluster"])
    state = cuda.build(tile_fn, num_warps, args.arch, stop_after="ptx" if args.emit != "sass" else None,
                       **switch_options({**switches, "verify": verify_switch()}))
    if args.emit == "sass":
        print(_sass(state.get("cubin"), args.arch))
    else:
        print(state[STAGES[args.emit]])
    return 0


def _sass(cubin: bytes | None, arch: str) -> str:
    """The SASS of ``cubin`` by ``nvdisasm`` (or ``cuobjdump``) from the CUDA toolkit."""
    import shutil
    import subprocess
    import tempfile
    if cubin is None:
        raise ValueError(f"no cubin for {arch}: nvJitLink or ptxas is needed (pip install nvidia-nvjitlink)")
    for tool, flags in (("nvdisasm", ["-c"]), ("cuobjdump", ["-sass"])):
        path = shutil.which(tool)
        if path:
            with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                f.write(cubin)
                f.flush()
                return subprocess.run([path, *flags, f.name], check=True, capture_output=True, text=True).stdout
    raise ValueError("--emit sass needs nvdisasm or cuobjdump on PATH: install the CUDA toolkit "
                     "(e.g. pip install nvidia-cuda-nvdisasm) or use --emit ptx")


def cache_command(args) -> int:
    from tilejit.runtime import cache
    if args.action == "info":
        found = cache.info()
        print(f"{found['dir']}: {found['entries']} kernels, {found['bytes']} bytes ({found['bytes'] / 2**20:.1f} MiB)")
    else:
        print(f"removed {cache.clear()} kernels from {cache.cache_dir()} (files tilejit did not write are left alone)")
    return 0


def _package_version(*names: str) -> str:
    import importlib.metadata
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "not installed"


def info_lines() -> list[str]:
    """What ``tilejit info`` prints: the versions tilejit runs on, the driver and GPUs (or why
    there are none), the backend a launch picks and the on-disk cache."""
    import platform

    import llvmlite.binding as llvm

    from tilejit import __version__
    from tilejit.codegen import ptxas
    from tilejit.runtime import cache, driver
    lines = [f"tilejit       {__version__}",
             f"python        {platform.python_version()} ({sys.executable})",
             f"llvmlite      {_package_version('llvmlite')} (LLVM {'.'.join(map(str, llvm.llvm_version_info))})",
             f"cuda-python   {_package_version('cuda-python', 'cuda-bindings')}"]
    nvjitlink = ptxas._nvjitlink()
    if nvjitlink is not None:
        lines.append(f"nvJitLink     {'.'.join(map(str, nvjitlink.version()))}")
    elif ptxas.ptxas_command():
        lines.append(f"nvJitLink     not found; assembling with {ptxas.ptxas_command()}")
    else:
        lines.append("nvJitLink     not found, nor ptxas (pip install nvidia-nvjitlink: inspect() then reports "
                     "registers and spills)")
    command = ptxas.ptxas_command()
    lines.append(f"ptxas         {command}: assembles warp-specialised kernels (setmaxnreg) whole-program" if command
                 else "ptxas         not found (TILEJIT_PTXAS, PATH or $CUDA_HOME/bin): the driver JIT-compiles "
                      "warp-specialised kernels when they are loaded")
    if driver.available():
        version = driver.device_properties(0).driver_version
        lines.append(f"driver        CUDA {version // 1000}.{version % 1000 // 10}")
        for d in range(driver.device_count()):
            p = driver.device_properties(d)
            lines.append(f"gpu {d}         {p.name}, compute capability {p.compute_capability[0]}."
                         f"{p.compute_capability[1]} ({p.target}), {p.sm_count} SMs")
    else:
        lines.append("gpu           none (no NVIDIA driver or no GPU found): kernels run on the CPU backends")
    lines.append(f"backend       {backends.selected()} (TILEJIT_BACKEND chooses another: {', '.join(backends.NAMES)})")
    from tilejit.runtime.launch import binding_in_use
    lines.append(f"launches      cuLaunchKernel through {binding_in_use()}")
    found = cache.info()
    lines.append(f"cache         {found['dir']}: {found['entries']} kernels, {found['bytes'] / 2**20:.1f} MiB "
                 "(TILEJIT_CACHE_DIR moves it; tilejit cache clear empties it)")
    return lines


def info_command(args) -> int:
    print("\n".join(info_lines()))
    return 0


def demo_command(args) -> int:
    from tilejit.demo import run_demo
    return 0 if run_demo(args.backend) else 1


def build_parser() -> argparse.ArgumentParser:
    from tilejit import __version__
    parser = argparse.ArgumentParser(prog="tilejit", description="JIT compiler for GPU tile kernels")
    parser.add_argument("--version", action="version", version=f"tilejit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="versions, driver, GPUs, the default backend and the cache")
    info.set_defaults(handler=info_command)
    demo = sub.add_parser("demo", help="compile and run the example kernels, check them against NumPy")
    demo.add_argument("--backend", choices=backends.NAMES, help="default: $TILEJIT_BACKEND or the best available")
    demo.set_defaults(handler=demo_command)
    comp = sub.add_parser("compile", help="print one compilation stage of a kernel")
    comp.add_argument("target", help="FILE::KERNEL")
    comp.add_argument("--const", action="append", default=[], metavar="NAME=VALUE")
    comp.add_argument("--sig", help="the runtime parameters in order, comma-separated: DTYPE[RANK] for an array "
                      "(float16[2]: a 2-D float16 array), DTYPE for a scalar, DTYPE+ for a float scalar > 0 (launches "
                      "specialise floats on it), None for a parameter passed None; "
                      "dtypes by name or short (f32 f16 bf16 i32 u8 ...), e.g. 'f16[2], f16[2], i32'")
    comp.add_argument("--num-warps", type=int, default=None,
                      help="warps per program (default: the compiler's choice, as a launch without num_warps)")
    comp.add_argument("--backend", choices=backends.NAMES, help="backend that builds the later stages")
    comp.add_argument("--arch", choices=["sm_80", "sm_90a"],
                      help="build the cuda stages for this GPU architecture (no GPU needed here)")
    comp.add_argument("--emit", choices=list(STAGES) + _pass_names(), default="tile",
                      help="a backend stage, or the IR after one pass of the pipeline")
    comp.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                      help="turn a compiler switch first (repeatable), e.g. --set prefetch_loads.PREFETCH_AHEAD=2")
    comp.set_defaults(handler=compile_command)
    cache = sub.add_parser("cache", help="inspect or clear the on-disk kernel cache")
    cache.add_argument("action", choices=["info", "clear"])
    cache.set_defaults(handler=cache_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (TilejitError, ValueError, FileNotFoundError) as err:
        print(f"tilejit: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:          # the reader went away (``tilejit compile ... | head``): quietly
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
