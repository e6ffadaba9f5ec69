"""How cost grows with the row length: softmax, layernorm and RMSNorm forward (the examples, with
``BLOCK = next_power_of_2(C)`` and no ``num_warps``) over rows of C columns, 2**26 elements per
run, against torch, Triton's tutorial kernels (``triton_kernels.py``) and the copy bandwidth
measured in the same run.

    python3 benchmarks/bench_sweep.py [--columns 128,1024,4096,16384,65536] [--dtypes float32,bfloat16]
                                      [--kernels softmax,layernorm,rmsnorm] [--png sweep.png]
                                      [--gemm 512,1024,2048,4096,8192]
                                      [--attention 1024,2048,4096,8192]

``--gemm`` adds the GEMM by size: bf16 M=N=K from the list, the best of ``bench_matmul.py``'s
configs (what ``tj.autotune`` picks from the same list) against cuBLAS and Triton in the same run.
``--attention`` adds FlashAttention forward by sequence length: bf16, D128, 32 heads, a batch of
16384 / S sequences (at least 1), full and causal, the best of ``bench_attention.py``'s wgmma
configs against SDPA's flash and cuDNN kernels in the same run.

Every output is poisoned with NaN, computed and checked against torch in float32 before it is
timed. Bytes moved: the input read and the output written (a weight row is not counted). With
``--png`` (needs matplotlib, the ``[bench]`` extra) the ratio to copy is plotted against C for
tilejit and torch.
"""
from __future__ import annotations

import argparse

import common
import tilejit as tj

ELEMENTS = 2 ** 26
TOLERANCE = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1e-2}
COLUMNS = [("kernel", "kernel", ""), ("cols", "C", ""), ("dtype", "dtype", ""), ("warps", "warps", ""),
           ("regs", "regs", ""), ("ctas", "min CTAs/SM", ""), ("spills", "spills", ""),
           ("tj", "tilejit GB/s", ".0f"), ("torch", "torch GB/s", ".0f"), ("copy", "copy GB/s", ".0f"),
           ("vs_copy", "tj/copy", ".3f"), ("torch_vs_copy", "torch/copy", ".3f"), ("vs_torch", "tj/torch", ".3f"),
           ("triton_vs_copy", "triton/copy", ".3f"), ("vs_triton", "tj/triton", ".3f"), ("err", "rel err", ".1e")]


def triton_twin(label: str, x, w, b, y):
    """The Triton tutorial kernel for ``label`` (benchmarks/triton_kernels.py), or None without
    Triton."""
    try:
        import triton_kernels as tk
    except ImportError:
        return None
    return {"softmax": lambda: tk.softmax(x, y), "layernorm": lambda: tk.layernorm(x, w, b, y, 1e-5),
            "rmsnorm": lambda: tk.rmsnorm(x, w, y, 1e-6)}[label]


def cases(torch, kernel: str, x, w, b, y):
    """(tilejit kernel, its arguments, torch in the dtype, torch in float32) for one kernel."""
    F, n = torch.nn.functional, x.shape[1]
    if kernel == "softmax":
        return (common.load_example("softmax").softmax_kernel, (x, y), lambda: torch.softmax(x, dim=1),
                lambda: torch.softmax(x.float(), dim=1))
    if kernel == "layernorm":
        return (common.load_example("layernorm").layernorm_kernel, (x, w, b, y, 1e-5),
                lambda: F.layer_norm(x, (n,), w, b, 1e-5), lambda: F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5))
    if kernel == "rmsnorm":
        return (common.load_example("rmsnorm").rmsnorm_kernel, (x, w, y, 1e-6),
                lambda: F.rms_norm(x, (n,), w, 1e-6), lambda: F.rms_norm(x.float(), (n,), w.float(), 1e-6))
    raise SystemExit(f"bench_sweep: unknown kernel {kernel!r} (softmax, layernorm or rmsnorm)")


def plot(rows: list[dict], path: str, gemm: list[dict] = (), attention: list[dict] = ()) -> None:
    """One panel per (row kernel, dtype): the fraction of copy bandwidth against the row length;
    then GEMM by size (fraction of cuBLAS) and attention by sequence length (fraction of cuDNN,
    full and causal) when those were measured."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted({(r["kernel"], r["dtype"]) for r in rows})
    panels = len(keys) + bool(gemm) + bool(attention)
    fig, axes = plt.subplots(1, panels, figsize=(4 * panels, 3.5), squeeze=False)
    extra = iter(axes[0][len(keys):])
    if gemm:
        ax = next(extra)
        sizes = [int(r["shape"].split("x")[0]) for r in gemm]
        ax.plot(sizes, [r.get("vs_cublas", float("nan")) for r in gemm], "o-", label="tilejit / cuBLAS")
        ax.plot(sizes, [r["triton"] / r["cublas"] for r in gemm], "^:", label="Triton / cuBLAS")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.2)
        ax.set_title("GEMM bf16, M=N=K")
        ax.set_xlabel("size")
        ax.set_ylabel("fraction of cuBLAS")
        ax.legend()
    if attention:
        ax = next(extra)
        for causal, style in ((False, "-"), (True, "--")):
            sel = [r for r in attention if r["causal"] == causal]
            seqs = [r["seq"] for r in sel]
            tag = "causal" if causal else "full"
            ax.plot(seqs, [r.get("vs_cudnn", float("nan")) for r in sel], "o" + style, label=f"tilejit / cuDNN, {tag}")
            ax.plot(seqs, [r["flash"] / r["cudnn"] for r in sel], "^" + style, label=f"SDPA flash / cuDNN, {tag}")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.3)
        ax.set_title("attention fwd bf16, D128")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("fraction of cuDNN")
        ax.legend(fontsize="small")
    for ax, (kernel, dtype) in zip(axes[0], keys):
        sel = [r for r in rows if (r["kernel"], r["dtype"]) == (kernel, dtype)]
        cols = [r["cols"] for r in sel]
        ax.plot(cols, [r["vs_copy"] for r in sel], "o-", label="tilejit")
        ax.plot(cols, [r["torch_vs_copy"] for r in sel], "s--", label="torch")
        ax.plot(cols, [r["triton_vs_copy"] for r in sel], "^:", label="triton (tutorial)")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.1)
        ax.set_title(f"{kernel} {dtype}")
        ax.set_xlabel("columns")
        ax.set_ylabel("fraction of copy bandwidth")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--columns", default="128,256,1024,4096,16384,32768,65536")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--kernels", default="softmax,layernorm,rmsnorm")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--png", default="")
    parser.add_argument("--elements", type=int, default=ELEMENTS, help="elements per run (rows = this / C)")
    parser.add_argument("--gemm", default="", help="comma-separated GEMM sizes (bf16 M=N=K) to add")
    parser.add_argument("--attention", default="", help="comma-separated sequence lengths of attention to add")
    args = parser.parse_args(argv)
    torch = common.require_cuda_torch()
    rows = []
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        for n in (int(c) for c in args.columns.split(",")):
            m = args.elements // n
            x, w, b, y, nbytes, copy = common.row_inputs(torch, m, n, dtype, args.reps)
            block = tj.next_power_of_2(n)
            for label in args.kernels.split(","):
                kernel, kargs, ref_fn, exact = cases(torch, label, x, w, b, y)

                def launch():
                    kernel[(m,)](*kargs, BLOCK=block)
                err = common.checked(torch, launch, y, exact, TOLERANCE[name], f"{label} C={n} {name}")
                tj_gbps = common.time_cuda(launch, setup=lambda: y.fill_(float("nan")), warmup=10,
                                           reps=args.reps).gbps(nbytes)
                torch_gbps = common.time_cuda(ref_fn, warmup=10, reps=args.reps).gbps(nbytes)
                triton_gbps = float("nan")
                twin = triton_twin(label, x, w, b, y)
                if twin is not None:
                    common.checked(torch, twin, y, exact, TOLERANCE[name], f"triton {label} C={n} {name}")
                    triton_gbps = common.time_cuda(twin, warmup=10, reps=args.reps).gbps(nbytes)
                found = kernel.inspect(*kargs, BLOCK=block)
                warps = found.num_warps
                rows.append({"kernel": label, "cols": n, "dtype": name, "warps": warps, "regs": found.registers,
                             "ctas": found.min_ctas_per_sm, "spills": found.spills, "tj": tj_gbps,
                             "torch": torch_gbps, "copy": copy, "vs_copy": tj_gbps / copy,
                             "torch_vs_copy": torch_gbps / copy, "vs_torch": tj_gbps / torch_gbps,
                             "triton_vs_copy": triton_gbps / copy, "vs_triton": tj_gbps / triton_gbps, "err": err})
                common.record(f"sweep-{label}", f"{m}x{n}", name, tj_gbps, "GB/s", "torch copy_ (same run)", copy,
                              tj_gbps / copy, torch_GBps=torch_gbps, triton_GBps=triton_gbps, num_warps=warps)
    rows.sort(key=lambda r: (r["kernel"], r["dtype"], r["cols"]))
    common.print_table(rows, COLUMNS, title=f"row kernels by length on {common.gpu_name()} (2**26 elements, "
                       f"CUDA events, median of {args.reps}, L2 flushed; no num_warps)")
    gemm = gemm_sweep(torch, [int(v) for v in args.gemm.split(",") if v], args.reps)
    attention = attention_sweep(torch, [int(v) for v in args.attention.split(",") if v], args.reps)
    if args.png:
        plot(rows, args.png, gemm, attention)
        print(f"plot: {args.png}")
    return 0


def gemm_sweep(torch, sizes: list[int], reps: int) -> list[dict]:
    """bf16 GEMM at M=N=K for each size: tilejit's best config against cuBLAS and Triton."""
    if not sizes:
        return []
    import bench_matmul
    rows = []
    for n in sizes:
        rows += bench_matmul.bench_shape(torch, (n, n, n), "bfloat16", bench_matmul.CONFIGS, reps)
    common.print_table(rows, [("shape", "shape", "s"), ("config", "best config", "s"),
                              ("tilejit", "tilejit TF/s", ".0f"), ("cublas", "cuBLAS TF/s", ".0f"),
                              ("triton", "Triton TF/s", ".0f"), ("vs_cublas", "tj/cuBLAS", ".3f"),
                              ("vs_triton", "tj/Triton", ".3f")],
                       title=f"GEMM bf16 by size on {common.gpu_name()} (CUDA events, median, L2 flushed)")
    return rows


ATTENTION_TOKENS, ATTENTION_HEADS, ATTENTION_DIM = 16384, 32, 128
ATTENTION_CONFIGS = [(128, 128, 8), (64, 128, 4)]          # bench_attention's wgmma configs


def attention_sweep(torch, seqs: list[int], reps: int) -> list[dict]:
    """Attention forward by sequence length (see the module docstring), full and causal."""
    if not seqs:
        return []
    import bench_attention
    rows = []
    for seq in seqs:
        batch = max(1, ATTENTION_TOKENS // seq)
        for causal in (False, True):
            row = bench_attention.measure(torch, batch, ATTENTION_HEADS, seq, ATTENTION_DIM, causal, reps,
                                          ATTENTION_CONFIGS)
            rows.append({**row, "seq": seq})
    common.print_table(rows, [("config", "config", "s"), ("causal", "causal", ""), ("best", "best config", "s"),
                              ("tilejit", "tilejit TF/s", ".0f"), ("flash", "flash TF/s", ".0f"),
                              ("cudnn", "cuDNN TF/s", ".0f"), ("vs_flash", "tj/flash", ".3f"),
                              ("vs_cudnn", "tj/cuDNN", ".3f")],
                       title=f"attention bf16 D128 by sequence length on {common.gpu_name()} (CUDA events, median)")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
