#!/usr/bin/env python3
"""One training step of accel-bench's vit_tiny_fmnist preset in PyTorch eager.

The reference for bench/bench_train_step.cpp (accel_bench's TrainStep): the
same model (lib/models/vit.cpp: conv patch embedding, class token, learned
position embedding, pre-LN encoder blocks, final LayerNorm, linear head; 5
classes as in the C++ benchmark), the same step (forward, cross-entropy,
zero_grad, backward, Adam step, loss.item()) on random data, run on the same
LibTorch when this is Debian's python3-torch (1.13) and build/ links Debian's
libtorch-dev.

    /usr/bin/python3 bench/eager_step.py --precision 32-true --batch 16 --threads 1

Prints one JSON line: impl, precision, batch, threads, step_ms_median,
step_ms_p10, step_ms_p90, images_per_s (batch / median step), params.
--ddp N runs N processes (--threads each, default 1) as PyTorch's own
DistributedDataParallel over Gloo on 127.0.0.1 (default 25 MB buckets, as
accel-bench's runtime.bucket_mb), batch per process, each its own random data;
rank 0 prints, images_per_s is the total (N x batch / rank 0's median step):
the peer of accel-bench's DDP in bench/scaling.sh (PEER=1).
--profile DIR also writes DIR/eager-ops.txt (top 40 ops by self CPU time) and
DIR/eager-trace.json (Chrome trace) from torch.profiler over a few more steps.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# vit_tiny_fmnist in lib/models/vit.cpp: make_spec(56, 1, 4, 96, 4, 4, 192, 10);
# bench_train_step.cpp sets num_classes = 5.
SPEC = dict(image_size=56, in_channels=1, patch_size=4, dim=96, depth=4, heads=4,
            mlp_dim=192, num_classes=5)
EXPECTED_PARAMS = 320453  # accel-bench's vit_param_count for SPEC
LN_EPS = 1e-6


class SelfAttention(nn.Module):
    """Packed q/k/v projection and softmax attention, as SelfAttentionImpl does on
    LibTorch 1.13 (compat::attention's explicit form with contiguous operands).
    attn="mha" uses nn.MultiheadAttention instead (torchvision's choice)."""

    def __init__(self, dim, heads, attn):
        super().__init__()
        self.heads = heads
        self.attn = attn
        if attn == "mha":
            self.mha = nn.MultiheadAttention(dim, heads, batch_first=True)
            return
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x):
        if self.attn == "mha":
            return self.mha(x, x, x, need_weights=False)[0]
        b, s, d = x.shape
        dh = d // self.heads
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        qkv = qkv.view(b, s, 3, self.heads, dh).permute(2, 0, 3, 1, 4).contiguous()
        q, k, v = qkv.unbind(0)
        scores = torch.matmul(q * (1.0 / math.sqrt(dh)), k.transpose(-2, -1).contiguous())
        out = torch.matmul(torch.softmax(scores, -1), v)
        return self.out_proj(out.transpose(1, 2).reshape(b, s, d))


class Mlp(nn.Module):
    def __init__(self, dim, mlp_dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, dim)
        for lin in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.normal_(lin.bias, std=1e-6)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-LN encoder block: x + attn(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, dim, heads, mlp_dim, attn):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.self_attention = SelfAttention(dim, heads, attn)
        self.ln_2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = Mlp(dim, mlp_dim)

    def forward(self, x):
        x = x + self.self_attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    def __init__(self, image_size, in_channels, patch_size, dim, depth, heads, mlp_dim,
                 num_classes, attn="explicit"):
        super().__init__()
        seq = (image_size // patch_size) ** 2 + 1
        self.conv_proj = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size)
        with torch.no_grad():
            fan_in = in_channels * patch_size * patch_size
            self.conv_proj.weight.normal_(0.0, math.sqrt(1.0 / fan_in)).clamp_(-2.0, 2.0)
            self.conv_proj.bias.zero_()
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, seq, dim).normal_(0.0, 0.02))
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_dim, attn) for _ in range(depth))
        self.ln = nn.LayerNorm(dim, eps=LN_EPS)
        self.head = nn.Linear(dim, num_classes)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        tokens = self.conv_proj(x).flatten(2).transpose(1, 2)  # [B, P, D]
        tokens = torch.cat([self.class_token.expand(x.shape[0], -1, -1), tokens], 1)
        tokens = tokens + self.pos_embedding
        for block in self.blocks:
            tokens = block(tokens)
        return self.head(self.ln(tokens).select(1, 0))


def percentile(sorted_xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--precision", choices=["32-true", "bf16-mixed"], default="32-true")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="0 = os.cpu_count()")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--attn", choices=["explicit", "mha"], default="explicit",
                    help="explicit = accel-bench's 1.13 attention; mha = nn.MultiheadAttention")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", metavar="DIR", help="write eager-ops.txt and eager-trace.json")
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--ddp", type=int, default=1, metavar="N",
                    help="N > 1: N processes under DistributedDataParallel over Gloo")
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 0 or args.ddp < 1:
        ap.error("--batch, --steps and --ddp must be >= 1, --warmup and --threads >= 0")
    if args.ddp > 1:
        if args.profile:
            ap.error("--profile is for one process")
        import socket
        import torch.multiprocessing as mp
        with socket.socket() as sock:  # a free port for the rendezvous
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        mp.spawn(run, args=(args, port), nprocs=args.ddp, join=True)
    else:
        run(0, args, None)


def run(rank, args, port):
    ddp = args.ddp > 1
    threads = args.threads or (1 if ddp else len(os.sched_getaffinity(0)))
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)

    model = ViT(**SPEC, attn=args.attn)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    if params != EXPECTED_PARAMS:
        print(f"eager_step: warning: {params} parameters, accel-bench has {EXPECTED_PARAMS}",
              file=sys.stderr)
    if ddp:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=args.ddp)
        model = nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
        torch.manual_seed(args.seed + 1 + rank)  # each rank its own batch
    opt = torch.optim.Adam(model.parameters(), lr=5e-5, betas=(0.9, 0.999), eps=1e-8)
    x = torch.randn(args.batch, SPEC["in_channels"], SPEC["image_size"], SPEC["image_size"])
    y = torch.randint(SPEC["num_classes"], (args.batch,), dtype=torch.long)
    bf16 = args.precision == "bf16-mixed"

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)

    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        os.makedirs(args.profile, exist_ok=True)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
            for _ in range(args.profile_steps):
                step()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
        with open(os.path.join(args.profile, "eager-ops.txt"), "w") as f:
            f.write(f"# eager_step.py {args.precision} batch {args.batch} threads {threads}, "
                    f"{args.profile_steps} steps, torch {torch.__version__}\n{table}\n")
        prof.export_chrome_trace(os.path.join(args.profile, "eager-trace.json"))

    if ddp:
        dist.destroy_process_group()
        if rank != 0:
            return
    times.sort()
    med = statistics.median(times)
    print(json.dumps({
        "impl": "eager-ddp" if ddp else "eager", "precision": args.precision,
        "batch": args.batch, "processes": args.ddp,
        "threads": threads, "step_ms_median": round(med, 3),
        "step_ms_p10": round(percentile(times, 0.1), 3),
        "step_ms_p90": round(percentile(times, 0.9), 3),
        "images_per_s": round(args.ddp * args.batch / med * 1e3, 2), "params": params,
    }))


if __name__ == "__main__":
    main()
