#!/usr/bin/env python3
"""The text ladder's training step in its peer stack: Hugging Face transformers'
BertForSequenceClassification driven by Lightning Fabric, on the CPU.

Same as accel-bench's text rungs (configs/ladder/text-cpu/t01-plain.json): the
all-MiniLM-L6-v2 encoder from its safetensors file, a new 2-class head, Adam 5e-5,
batch 12, seed 123, dropout on (train mode), real Rotten Tomatoes critic snippets
tokenized by the encoder's own tokenizer.json and padded to --max-length (fixed
padding: every batch has the same shape on both sides). Times WARMUP + STEPS
steps (forward, cross-entropy, fabric.backward, Adam step, zero_grad), prints one
JSON line: samples_per_s (batch / mean step time after the warm-up, as
accel-bench's result.json computes it), step_ms_median, params, versions.

    python3 bench/text_peer.py --precision bf16-mixed --threads 2
Driven by bench/text_peer.sh, which alternates it with `accel-bench run`.
Needs torch, transformers, tokenizers and lightning_fabric (scripts/setup.sh
--bench installs them next to the CUDA leg's torch; bench/text_peer.sh sets
PYTHONPATH).
"""
import argparse
import bz2
import csv
import json
import os
import platform
import random
import statistics
import sys
import time

TEXT = os.environ.get("ACCEL_TEXT_DIR", "/opt/accel-bench/text")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--encoder", default=os.path.join(TEXT, "all-MiniLM-L6-v2"),
                   help="folder with config.json, model.safetensors, tokenizer.json")
    p.add_argument("--corpus", default=os.path.join(TEXT, "rotten-tomatoes", "rotten_tomatoes_corpus_full.csv.bz2"))
    p.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--seed", type=int, default=123)
    a = p.parse_args()
    if a.threads < 1 or a.batch < 1 or a.steps < 1 or a.warmup < 0 or a.max_length < 2:
        sys.exit("text_peer: --threads, --batch, --steps >= 1, --warmup >= 0, --max-length >= 2")

    try:
        import torch
        import transformers
        from transformers import BertConfig, BertForSequenceClassification
        from tokenizers import Tokenizer
        import lightning_fabric
        from lightning_fabric import Fabric
        from safetensors.torch import load_file
    except ImportError as e:
        sys.exit("text_peer: cannot import %s (scripts/setup.sh --bench installs the peer)" % e.name)

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)

    # The snippets: critic reviews labelled fresh (1) or rotten (0), shuffled by the seed.
    with bz2.open(a.corpus, "rt", newline="") as f:
        rows = [(r["text"], 1 if r["category"] == "fresh" else 0)
                for r in csv.DictReader(f) if r["category"] in ("fresh", "rotten")]
    random.Random(a.seed).shuffle(rows)
    n = a.batch * (a.warmup + a.steps)
    if len(rows) < n:
        sys.exit("text_peer: %s has %d snippets, %d needed" % (a.corpus, len(rows), n))
    rows = rows[:n]
    tok = Tokenizer.from_file(os.path.join(a.encoder, "tokenizer.json"))
    tok.enable_truncation(a.max_length)
    tok.enable_padding(length=a.max_length, pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch([t for t, _ in rows])
    ids = torch.tensor([e.ids for e in enc], dtype=torch.long)
    mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.long)
    labels = torch.tensor([y for _, y in rows], dtype=torch.long)

    # The model: the encoder's weights (a BertModel file: no "bert." prefix), a new head.
    fabric = Fabric(accelerator="cpu", devices=1, precision=a.precision)
    fabric.seed_everything(a.seed, verbose=False)
    with open(os.path.join(a.encoder, "config.json")) as f:
        cfg = BertConfig(**{k: v for k, v in json.load(f).items() if not k.startswith("_")}, num_labels=2)
    model = BertForSequenceClassification(cfg)
    state = {("bert." + k): v for k, v in load_file(os.path.join(a.encoder, "model.safetensors")).items()
             if not k.endswith("position_ids")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if sorted(missing) != ["classifier.bias", "classifier.weight"] or unexpected:
        sys.exit("text_peer: the encoder file does not match BertForSequenceClassification: missing %s, unexpected %s"
                 % (missing, unexpected))
    params = sum(t.numel() for t in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
    model, optimizer = fabric.setup(model, optimizer)
    model.train()

    times = []
    for s in range(a.warmup + a.steps):
        sl = slice(s * a.batch, (s + 1) * a.batch)
        t0 = time.perf_counter()
        out = model(input_ids=ids[sl], attention_mask=mask[sl], labels=labels[sl])
        fabric.backward(out.loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        if not torch.isfinite(out.loss.detach()):
            sys.exit("text_peer: loss is not finite at step %d" % s)
    timed = times[a.warmup:]
    mean = sum(timed) / len(timed)
    print(json.dumps({
        "precision": a.precision, "threads": a.threads, "batch": a.batch, "max_length": a.max_length,
        "warmup": a.warmup, "steps": a.steps, "params": params,
        "samples_per_s": a.batch / mean, "step_ms_mean": 1000 * mean,
        "step_ms_median": 1000 * statistics.median(timed), "last_loss": float(out.loss.detach()),
        "attn_implementation": getattr(model.config, "_attn_implementation", None)
        if hasattr(model, "config") else getattr(cfg, "_attn_implementation", None),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "lightning_fabric": lightning_fabric.__version__, "cpu": platform.processor() or platform.machine(),
    }))


if __name__ == "__main__":
    main()
