#!/usr/bin/env python3
"""The decoder ladder's training step as a plain PyTorch user writes it: an eager
nanoGPT-style GPT (the layout of Karpathy's nanoGPT model.py: wte, wpe, pre-LayerNorm
blocks with one c_attn projection and F.scaled_dot_product_attention(is_causal=True),
a tanh-GELU MLP, ln_f, the output projection tied to wte), on the CPU.

Same as accel-bench's packed decoder rungs (configs/ladder/lm-cpu/l03-packing.json in
32-true): gpt_tiny's dims (4 layers x 128, 4 heads, MLP 512, 256 position rows,
dropout 0), BERT's uncased WordPiece vocabulary of 30,522 (the MiniLM folder's
tokenizer.json, "[CLS] text [SEP]" a snippet, as accel-bench's tokenizer), the real
Rotten Tomatoes snippets shuffled by the seed and packed into one stream, windows of
--seq + 1 tokens a row (inputs and next tokens), batch 16, AdamW 1e-3 without weight
decay, nanoGPT's initialisation (normal 0.02, the residual projections 0.02 / sqrt(2
layers)). The loss is nanoGPT's: the whole [tokens, vocab] logits, then
F.cross_entropy. Times WARMUP + STEPS steps (forward, loss, backward, AdamW step,
zero_grad) and prints one JSON line: tokens_per_s and samples_per_s (from the mean
step after the warm-up, as accel-bench's result.json), step_ms_median, params, the
AdamW implementation, versions.

    python3 bench/lm_peer.py --threads 2 --adam fused
Driven by bench/lm_peer.sh, which alternates it with `accel-bench run`. Needs torch
and tokenizers (scripts/setup.sh --bench; bench/lm_peer.sh sets PYTHONPATH).
"""
import argparse
import bz2
import csv
import json
import math
import os
import platform
import random
import statistics
import sys
import time

TEXT = os.environ.get("ACCEL_TEXT_DIR", "/opt/accel-bench/text")


def build_model(torch, vocab, positions, layers, hidden, heads, intermediate):
    nn = torch.nn
    F = torch.nn.functional

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(hidden, 3 * hidden)
            self.c_proj = nn.Linear(hidden, hidden)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.c_attn(x).split(h, dim=2)
            q, k, v = (t.view(b, s, heads, h // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, s, h))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(hidden, intermediate)
            self.c_proj = nn.Linear(intermediate, hidden)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(hidden)
            self.attn = SelfAttention()
            self.ln_2 = nn.LayerNorm(hidden)
            self.mlp = Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, hidden), wpe=nn.Embedding(positions, hidden),
                h=nn.ModuleList([Block() for _ in range(layers)]), ln_f=nn.LayerNorm(hidden)))
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            self.lm_head.weight = self.transformer.wte.weight  # tied, as GPT-2
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
                elif p.dim() == 2:
                    torch.nn.init.normal_(p, 0.0, 0.02)
                elif name.endswith(".bias") and "ln_" not in name:
                    torch.nn.init.zeros_(p)

        def forward(self, ids, targets):
            t = self.transformer
            pos = torch.arange(ids.size(1), dtype=torch.long)
            x = t.wte(ids) + t.wpe(pos)
            for block in t.h:
                x = block(x)
            logits = self.lm_head(t.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-100)

    return GPT()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokenizer", default=os.path.join(TEXT, "all-MiniLM-L6-v2", "tokenizer.json"))
    p.add_argument("--corpus", default=os.path.join(TEXT, "rotten-tomatoes", "rotten_tomatoes_corpus_full.csv.bz2"))
    p.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--positions", type=int, default=256)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--adam", default="fused", choices=["fused", "foreach", "for-loop"],
                   help="AdamW's implementation (fused: torch's fused CPU kernel, torch >= 2.4)")
    p.add_argument("--seed", type=int, default=123)
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="print torch.profiler's N ops of most self time over the timed steps to stderr")
    a = p.parse_args()
    if a.threads < 1 or a.batch < 1 or a.steps < 1 or a.warmup < 0 or a.seq < 2 or a.seq > a.positions:
        sys.exit("lm_peer: --threads, --batch, --steps >= 1, --warmup >= 0, 2 <= --seq <= --positions")

    try:
        import torch
        from tokenizers import Tokenizer
    except ImportError as e:
        sys.exit("lm_peer: cannot import %s (scripts/setup.sh --bench installs the peer)" % e.name)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)

    # The stream: every snippet "[CLS] text [SEP]", shuffled by the seed, end to end.
    with bz2.open(a.corpus, "rt", newline="") as f:
        texts = [r["text"] for r in csv.DictReader(f) if r["category"] in ("fresh", "rotten")]
    random.Random(a.seed).shuffle(texts)
    tok = Tokenizer.from_file(a.tokenizer)
    need = a.batch * (a.warmup + a.steps) * a.seq + 1
    stream = []
    for i in range(0, len(texts), 512):
        for e in tok.encode_batch(texts[i:i + 512]):
            stream.extend(e.ids)
        if len(stream) >= need:
            break
    if len(stream) < need:
        sys.exit("lm_peer: %s gives %d tokens, %d needed" % (a.corpus, len(stream), need))
    vocab = tok.get_vocab_size()
    windows = torch.tensor(stream[:need - 1], dtype=torch.long).view(-1, a.seq)
    nexts = torch.tensor(stream[1:need], dtype=torch.long).view(-1, a.seq)

    model = build_model(torch, vocab, a.positions, a.layers, a.hidden, a.heads, a.intermediate)
    model.train()
    params = sum(t.numel() for t in model.parameters())
    kind = {"fused": dict(fused=True), "foreach": dict(foreach=True), "for-loop": dict(foreach=False)}[a.adam]
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0, **kind)
    except (RuntimeError, TypeError) as e:
        sys.exit("lm_peer: torch %s has no %s AdamW here: %s" % (torch.__version__, a.adam, e))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16-mixed")

    profiler = None
    times = []
    for s in range(a.warmup + a.steps):
        if s == a.warmup and a.profile > 0:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            profiler.__enter__()
        rows = slice(s * a.batch, (s + 1) * a.batch)
        t0 = time.perf_counter()
        with autocast:
            loss = model(windows[rows], nexts[rows])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        if not torch.isfinite(loss.detach()):
            sys.exit("lm_peer: the loss is not finite at step %d" % s)
    if profiler is not None:
        profiler.__exit__(None, None, None)
        print("profile of the %d timed steps (self time over all of them):" % a.steps, file=sys.stderr)
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.profile), file=sys.stderr)
    timed = times[a.warmup:]
    mean = sum(timed) / len(timed)
    print(json.dumps({
        "precision": a.precision, "threads": a.threads, "batch": a.batch, "seq": a.seq,
        "warmup": a.warmup, "steps": a.steps, "params": params, "vocab": vocab, "adam": a.adam,
        "tokens_per_s": a.batch * a.seq / mean, "samples_per_s": a.batch / mean, "step_ms_mean": 1000 * mean,
        "step_ms_median": 1000 * statistics.median(timed), "last_loss": float(loss.detach()),
        "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
    }))


if __name__ == "__main__":
    main()
