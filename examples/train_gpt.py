"""A training loop with tilejit kernels inside a PyTorch model: a small GPT (token embedding,
pre-norm blocks of causal attention and an MLP, a head tied to the embedding) trained on
synthetic sequences, once on tilejit's kernels and once on torch's, from the same initial
weights and data, comparing their loss curves and step times.

tilejit's side runs three kernels as ``tilejit.torch`` custom ops (so ``--compile`` traces the
model with ``torch.compile(fullgraph=True)``, no graph break), each with its backward:
- RMSNorm (``examples/rmsnorm.py``'s kernel; its backward in torch);
- the MLP's first GEMM with the bias and the GELU in its epilogue (``linear_gelu_kernel`` below,
  which also stores the pre-activation for the backward; the backward GEMMs in torch);
- causal FlashAttention forward and backward (``examples/attention_backward.py``).
torch's side: the same RMSNorm formula, ``F.gelu(x @ w + b)``, and SDPA.

    python3 examples/train_gpt.py [--steps 200] [--compile] [--tiny]
    torchrun --nproc_per_node=N examples/train_gpt.py [...]     # DDP over N GPUs (NCCL)

Without a GPU it runs on torch's CPU tensors with the kernels on tilejit's CPU backends (slow:
use ``--tiny`` and a few steps); on a GPU it trains in bfloat16.
"""

import argparse
import math
import os
import time

import tilejit as tj

try:
    from tilejit.examples import attention_backward, rmsnorm
except ImportError:                                   # run as a script from a source checkout
    import attention_backward
    import rmsnorm


@tj.kernel
def linear_gelu_kernel(x, w, b, h, y, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """h = x @ w + b and y = gelu(h) (erf form) for one (BM, BN) block, accumulated in float32."""
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, x.shape[1], BK):
        acc = tj.dot(tj.load(x, (m, k), (BM, BK)), tj.load(w, (k, n), (BK, BN)), acc)
    acc = acc + tj.load(b, (n,), (BN,)).to(tj.float32)[None, :]
    tj.store(h, (m, n), acc.to(h.dtype))
    tj.store(y, (m, n), (0.5 * acc * (1.0 + tj.erf(acc * 0.7071067811865476))).to(y.dtype))


_OPS = None


def tilejit_ops():
    """The three kernels as autograd-able torch ops (registered once): ``norm(x2d, w, eps)``,
    ``linear_gelu(x2d, w, b)``, ``attention(q, k, v)`` (causal)."""
    global _OPS
    if _OPS is not None:
        return _OPS
    import torch
    import tilejit.torch as tjt

    @tjt.op("tilejit_gpt::rmsnorm")
    def norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        y = torch.empty_like(x)
        rmsnorm.rmsnorm_kernel[(x.shape[0],)](x, w, y, eps, BLOCK=tj.next_power_of_2(x.shape[1]))
        return y

    def norm_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1])
        ctx.eps = inputs[2]

    def norm_backward(ctx, dy):
        x, w = (t.float() for t in ctx.saved_tensors)
        r = torch.rsqrt((x * x).mean(-1, keepdim=True) + ctx.eps)
        xhat, g = x * r, dy.float() * w
        dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx.to(dy.dtype), (dy.float() * xhat).sum(0).to(w.dtype), None
    norm.register_autograd(norm_backward, setup_context=norm_setup)

    @tjt.op("tilejit_gpt::linear_gelu")
    def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.empty((x.shape[0], w.shape[1]), dtype=x.dtype, device=x.device)
        y = torch.empty_like(h)
        BM, BN, BK, warps = (128, 128, 64, 8) if x.is_cuda else (32, 32, 32, 4)
        linear_gelu_kernel[(tj.cdiv(x.shape[0], BM), tj.cdiv(w.shape[1], BN))](
            x, w, b, h, y, BM=BM, BN=BN, BK=BK, num_warps=warps)
        return y, h

    def linear_gelu_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1], output[1])

    def linear_gelu_backward(ctx, dy, _dh):
        x, w, h = ctx.saved_tensors
        hf = h.float()
        slope = 0.5 * (1.0 + torch.erf(hf * 0.7071067811865476)) + hf * torch.exp(-0.5 * hf * hf) / math.sqrt(2 * math.pi)
        dh = (dy.float() * slope).to(x.dtype)
        return dh @ w.t(), x.t() @ dh, dh.float().sum(0).to(w.dtype)
    linear_gelu.register_autograd(linear_gelu_backward, setup_context=linear_gelu_setup)

    attention = attention_backward.torch_attention()
    _OPS = {"norm": norm, "linear_gelu": lambda x, w, b: linear_gelu(x, w, b)[0],
            "attention": lambda q, k, v: attention(q, k, v, True)}
    return _OPS


def torch_ops():
    import torch
    import torch.nn.functional as F

    def norm(x, w, eps):
        xf = x.float()
        return (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
    return {"norm": norm, "linear_gelu": lambda x, w, b: F.gelu(x @ w + b),
            "attention": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)}


def build_model(torch, vocab: int, dim: int, heads: int, layers: int, hidden: int):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
            self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
            self.w1 = nn.Parameter(torch.randn(dim, hidden) / math.sqrt(dim))
            self.b1 = nn.Parameter(torch.zeros(hidden))
            self.fc2 = nn.Linear(hidden, dim, bias=False)

        def forward(self, x, ops):
            batch, seq, _ = x.shape
            h = ops["norm"](x.reshape(-1, dim), self.norm1, 1e-6)
            q, k, v = self.qkv(h).reshape(batch, seq, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            a = ops["attention"](q.contiguous(), k.contiguous(), v.contiguous())
            x = x + self.proj(a.transpose(1, 2).reshape(batch, seq, dim))
            h = ops["norm"](x.reshape(-1, dim), self.norm2, 1e-6)
            dt = ops["dtype"]                             # the MLP's GEMM in the training dtype
            return x + self.fc2(ops["linear_gelu"](h.to(dt), self.w1.to(dt), self.b1.to(dt))).reshape(batch, seq, dim)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            nn.init.normal_(self.embed.weight, std=0.02)      # it is the head too: small logits
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.Parameter(torch.ones(dim))
            self.ops = None                               # set by the trainer: tilejit's or torch's

        def forward(self, tokens):
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x, self.ops)
            h = self.ops["norm"](x.reshape(-1, dim), self.norm, 1e-6)
            return h @ self.embed.weight.t()              # (batch * seq, vocab) logits
    return GPT()


def batches(torch, vocab: int, batch: int, seq: int, steps: int, seed: int, device):
    """Sequences t[i+1] = (5 t[i] + 3 + noise) mod vocab: learnable, with noise so the loss
    does not reach zero."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        t = torch.empty((batch, seq + 1), dtype=torch.long)
        t[:, 0] = torch.randint(0, vocab, (batch,), generator=gen)
        noise = (torch.rand((batch, seq), generator=gen) < 0.1) * torch.randint(1, vocab, (batch, seq), generator=gen)
        for i in range(seq):
            t[:, i + 1] = (5 * t[:, i] + 3 + noise[:, i]) % vocab
        yield t[:, :-1].to(device), t[:, 1:].to(device)


def train(torch, model, ops, args, device, dtype, rank: int, world: int):
    """Losses and per-step seconds of ``args.steps`` AdamW steps with ``ops``."""
    model.ops = dict(ops, dtype=dtype)
    step_model = model
    if world > 1:
        step_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.index is not None else None)
    forward = torch.compile(step_model, fullgraph=True) if args.compile else step_model
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    losses, times = [], []
    for tokens, targets in batches(torch, args.vocab, args.batch, args.seq, args.steps, args.seed + rank, device):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = forward(tokens)
        loss = torch.nn.functional.cross_entropy(logits.float(), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(float(loss.detach()))
    return losses, times


def main(argv=None) -> dict:
    import torch
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) around the model")
    parser.add_argument("--tiny", action="store_true", help="a model small enough for the CPU backends")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    size = dict(vocab=64, dim=32, heads=2, layers=1, hidden=64, batch=2, seq=16) if args.tiny else \
        dict(vocab=4096, dim=512, heads=8, layers=4, hidden=2048, batch=16, seq=512)
    for k, v in size.items():
        setattr(args, k, v)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    cuda = torch.cuda.is_available()
    if world > 1:
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(args.seed)
    reference = build_model(torch, args.vocab, args.dim, args.heads, args.layers, args.hidden).to(device)
    mine = build_model(torch, args.vocab, args.dim, args.heads, args.layers, args.hidden).to(device)
    mine.load_state_dict(reference.state_dict())
    results = {}
    for name, model, ops in (("torch", reference, torch_ops()), ("tilejit", mine, tilejit_ops())):
        results[name] = train(torch, model, ops, args, device, dtype, rank, world)
    (ref_loss, ref_t), (loss, t) = results["torch"], results["tilejit"]
    gap = max(abs(a - b) / b for a, b in zip(loss, ref_loss))
    warm = slice(min(3, len(t) - 1), None)              # the first steps compile
    step, ref_step = sorted(t[warm])[len(t[warm]) // 2], sorted(ref_t[warm])[len(ref_t[warm]) // 2]
    if rank == 0:
        print(f"{args.steps} steps on {device} ({dtype}, {world} process{'es' if world > 1 else ''}"
              f"{', torch.compile' if args.compile else ''}): loss {ref_loss[0]:.3f} -> torch {ref_loss[-1]:.3f}, "
              f"tilejit {loss[-1]:.3f}; largest relative gap {gap:.2e}; median step torch {ref_step * 1e3:.1f} ms, "
              f"tilejit {step * 1e3:.1f} ms ({ref_step / step:.2f}x)")
    if world > 1:
        torch.distributed.barrier()                       # no rank tears gloo down under another
        torch.distributed.destroy_process_group()
    return {"torch": ref_loss, "tilejit": loss, "gap": gap, "step_s": step, "torch_step_s": ref_step}


if __name__ == "__main__":
    main()
