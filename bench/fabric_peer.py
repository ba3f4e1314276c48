#!/usr/bin/env python3
"""The peer benchmark: accel-bench's training step through Lightning Fabric.

The step cvpr2023's 03/04 scripts run (forward, cross-entropy, zero_grad,
fabric.backward, Adam step), on torchvision's vit_b_16 (random init, 10
classes, 224 px; or a tiny torchvision ViT at 32 px for CPU tests), Adam at lr
5e-5 as the GPU ladder (configs/ladder/gpu-vit-b16/). Like for like with
accel-bench by default: the fused Adam (torch.optim.Adam(fused=True), the
multi-tensor kernel accel-bench steps on a GPU; --optimizer foreach is torch's
default), and each step's batch copied from pinned host memory with
non_blocking, as accel-bench's loader hands its batches over (--inputs host;
--inputs device makes them once on the device). --compile MODE runs the model
through torch.compile (mode "default" or "reduce-overhead", the article's rung
02), its compilation timed apart from the steps (compile_s: the first
warm-up step's seconds, which compile; warmup_s: all warm-up steps).
WARMUP steps, then STEPS timed steps between two torch.cuda.synchronize() calls. By default (--sync end) no step waits for the
device, as accel-bench's steps do not on a GPU (it reads losses back only at
log steps): each step is timed by a CUDA event pair on the current stream
(host clock on a CPU), read after the loop. --sync step ends each step with
loss.item() instead (a host sync per step, as many training scripts do), which
costs the peer the launch latency that accel-bench does not pay.

    python3 bench/fabric_peer.py --precision bf16-mixed --batch 128
    python3 bench/fabric_peer.py --model tiny --accelerator cpu --steps 5   # CPU test

Prints one JSON line: impl, model, precision, batch, images_per_s (batch /
mean event-timed step, as accel-bench's images_per_s), wall_images_per_s
(batch x STEPS / the loop's wall seconds, as accel-bench's
wall_images_per_s), step_ms_median / p10 / p90 / mean, params, torch, lightning, device,
device_name, matmul_precision, sync, optimizer, inputs, compile, compile_s, warmup_s. --print-spec prints the model's
dimensions (for accel-bench's model.* fields) and exits. bench/fabric_peer.sh
runs this beside accel-bench and prints the ratio.
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

# vit_b_16 is torchvision's; tiny is the same class with small dimensions, the
# dims accel-bench's model.preset=custom gets from bench/fabric_peer.sh.
SPECS = {
    "vit_b_16": dict(image_size=224, patch_size=16, depth=12, heads=12, dim=768, mlp_dim=3072),
    "tiny": dict(image_size=32, patch_size=8, depth=2, heads=2, dim=64, mlp_dim=128),
}


def percentile(sorted_xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def device_name(torch, device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def build_model(torch, args, spec):
    from torchvision.models.vision_transformer import VisionTransformer

    model = VisionTransformer(image_size=spec["image_size"], patch_size=spec["patch_size"],
                              num_layers=spec["depth"], num_heads=spec["heads"],
                              hidden_dim=spec["dim"], mlp_dim=spec["mlp_dim"],
                              num_classes=args.num_classes)
    if args.in_channels != 3:
        # accel-bench's synthetic images have one channel; torchvision's patch
        # embedding takes three. Same layer, as torchvision initialises it.
        conv = torch.nn.Conv2d(args.in_channels, spec["dim"], spec["patch_size"],
                               stride=spec["patch_size"])
        fan_in = conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1]
        torch.nn.init.trunc_normal_(conv.weight, std=math.sqrt(1 / fan_in))
        torch.nn.init.zeros_(conv.bias)
        model.conv_proj = conv
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(SPECS), default="vit_b_16")
    ap.add_argument("--precision", choices=["32-true", "bf16-mixed", "16-mixed", "bf16-true"],
                    default="32-true")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=50, help="timed steps")
    ap.add_argument("--accelerator", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--matmul-precision", choices=["highest", "high", "medium"],
                    default="highest", help="torch.set_float32_matmul_precision")
    ap.add_argument("--in-channels", type=int, default=3,
                    help="input channels (accel-bench's synthetic data has 1)")
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads; 0 = torch's default")
    ap.add_argument("--sync", choices=["step", "end"], default="end",
                    help="end = no per-step host sync, steps timed by CUDA events (as accel-bench); "
                         "step = loss.item() after every step")
    ap.add_argument("--optimizer", choices=["fused", "foreach"], default="fused",
                    help="fused = torch.optim.Adam(fused=True), as accel-bench's update; foreach = torch's default")
    ap.add_argument("--inputs", choices=["host", "device"], default="host",
                    help="host = each step's batch copied from pinned host memory (non_blocking), as accel-bench's "
                         "loader hands batches over; device = made once on the device")
    ap.add_argument("--compile", choices=["none", "default", "reduce-overhead"], default="none",
                    help="torch.compile the model with this mode (none: eager)")
    ap.add_argument("--print-spec", action="store_true", help="print the model's dims and exit")
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 0:
        ap.error("--batch and --steps must be >= 1, --warmup and --threads >= 0")
    if args.in_channels < 1 or args.num_classes < 1:
        ap.error("--in-channels and --num-classes must be >= 1")
    spec = dict(SPECS[args.model], num_classes=args.num_classes, in_channels=args.in_channels)
    if args.print_spec:
        print(json.dumps(spec))
        return

    try:
        import torch
        import torch.nn.functional as F
        try:  # the lightning package, or its standalone lightning-fabric
            import lightning
            from lightning.fabric import Fabric
        except ImportError:
            import lightning_fabric as lightning
            from lightning_fabric import Fabric
        import torchvision  # noqa: F401 (the model's class)
    except ImportError as e:
        sys.exit("fabric_peer: cannot import %s (pip install lightning torchvision)" % e.name)

    if args.accelerator == "cuda" and not torch.cuda.is_available():
        sys.exit("fabric_peer: --accelerator cuda, but torch %s sees no GPU" % torch.__version__)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision(args.matmul_precision)

    fabric = Fabric(accelerator=args.accelerator, devices=1, precision=args.precision)
    fabric.launch()
    fabric.seed_everything(args.seed, verbose=False)
    device = fabric.device
    cuda = device.type == "cuda"

    model = build_model(torch, args, spec)
    params = sum(p.numel() for p in model.parameters())
    try:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr,
                                     **({"fused": True} if args.optimizer == "fused" else {"foreach": True}))
    except (RuntimeError, ValueError) as e:  # fused Adam on a CPU needs torch 2.4 or later
        sys.exit("fabric_peer: --optimizer %s on %s: %s (--optimizer foreach is torch's default)"
                 % (args.optimizer, device.type, str(e).splitlines()[0]))
    if args.compile != "none":
        model = torch.compile(model, mode=args.compile)
    model, optimizer = fabric.setup(model, optimizer)
    model.train()
    shape = (args.batch, args.in_channels, spec["image_size"], spec["image_size"])
    if args.inputs == "device":
        pool = [(torch.randn(shape, device=device), torch.randint(0, args.num_classes, (args.batch,), device=device))]
    else:
        # A few batches in pinned host memory, one copied to the device each
        # step without waiting (the copy overlaps the step before, as
        # accel-bench's pinned loader batches do).
        pin = cuda
        pool = [(torch.randn(shape).pin_memory() if pin else torch.randn(shape),
                 torch.randint(0, args.num_classes, (args.batch,)).pin_memory() if pin
                 else torch.randint(0, args.num_classes, (args.batch,)))
                for _ in range(4)]
    calls = [0]

    def batch():
        hx, hy = pool[calls[0] % len(pool)]
        calls[0] += 1
        if args.inputs == "device":
            return hx, hy
        return hx.to(device, non_blocking=True), hy.to(device, non_blocking=True)

    def step():
        x, y = batch()
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        fabric.backward(loss)
        optimizer.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    # Warm-up: with --compile, the first step compiles (and reduce-overhead's
    # next ones record its CUDA graphs): timed apart from the steps.
    compile_s = None
    w0 = time.perf_counter()
    for i in range(args.warmup):
        step()
        if i == 0:
            sync()
            compile_s = time.perf_counter() - w0
    sync()
    warmup_s = time.perf_counter() - w0
    # Per-step times without a host sync: CUDA event pairs on the current
    # stream, read after the loop (host clock on a CPU, where steps are synchronous).
    events = []
    host = []
    t0 = time.perf_counter()
    for _ in range(args.steps):
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        s0 = time.perf_counter()
        loss = step()
        if args.sync == "step":
            loss.item()
        if cuda:
            end.record()
            events.append((begin, end))
        else:
            host.append((time.perf_counter() - s0) * 1e3)
    sync()
    total = time.perf_counter() - t0
    times = [b.elapsed_time(e) for b, e in events] if cuda else host
    last = loss.item()
    if not math.isfinite(last):
        sys.exit("fabric_peer: non-finite loss %s after %d steps" % (last, args.warmup + args.steps))
    mean_ms = statistics.fmean(times)
    times.sort()
    print(json.dumps({
        "impl": "fabric", "model": args.model, "precision": args.precision,
        "batch": args.batch, "warmup": args.warmup, "steps": args.steps,
        "images_per_s": round(args.batch / mean_ms * 1e3, 2),
        "wall_images_per_s": round(args.batch * args.steps / total, 2),
        "wall_s": round(total, 4),
        "step_ms_median": round(statistics.median(times), 3),
        "step_ms_p10": round(percentile(times, 0.1), 3),
        "step_ms_p90": round(percentile(times, 0.9), 3),
        "step_ms_mean": round(mean_ms, 3),
        "params": params, "spec": spec, "loss": round(last, 5),
        "torch": torch.__version__, "lightning": lightning.__version__,
        "device": device.type, "device_name": device_name(torch, device),
        "threads": torch.get_num_threads(), "matmul_precision": args.matmul_precision,
        "sync": args.sync, "optimizer": args.optimizer, "inputs": args.inputs, "compile": args.compile,
        "compile_s": round(compile_s, 3) if compile_s is not None and args.compile != "none" else None,
        "warmup_s": round(warmup_s, 3),
    }))


if __name__ == "__main__":
    main()
