#!/usr/bin/env python3
"""Reference ids from Hugging Face `tokenizers` for accel-bench's byte-level BPE tests.

Not run by the tests (they need no Python): it made tests/data/bpe_cases.json, the
fixture test_tokenizer.cpp compares the gguf-bpe tokenizer's ids with. The reference
tokenizer is built from the GGUF's own tokens and merges (the file carries them in its
metadata) with SmolLM2's pre-tokenizer (Digits with individual digits, then ByteLevel
without a prefix space) and its control tokens as special added tokens; no BOS is
added (tokenizer.ggml.add_bos_token is false for a vocabulary of 49,152), so the ids
are the text's alone, without the end-of-text token the CLI's documents end with:

  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install tokenizers
  /tmp/hf/bin/python tests/reference/hf_bpe_ids.py \\
      /opt/accel-bench/text/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf \\
      > tests/data/bpe_cases.json
  # a corpus, one text per line (or the Rotten Tomatoes .csv.bz2, its "text" column),
  # compared with `accel-bench tokenize --tokenizer gguf-bpe`:
  /tmp/hf/bin/python tests/reference/hf_bpe_ids.py FILE.gguf \\
      --corpus /opt/accel-bench/text/rotten-tomatoes/rotten_tomatoes_corpus_full.csv.bz2 \\
      --accel-bench build/accel-bench
"""
import argparse
import bz2
import csv
import hashlib
import io
import json
import struct
import subprocess
import sys

CASES = [
    "", " ", "  ", "\n", "Hello, world!", "The year 2024 had 366 days.",
    "<|im_start|>user\nWhat is GGUF?<|im_end|>", "  two  spaces\ttab\nnewline café 😀",
    "The capital of France is", "don't you'll we've they're I'm he'd it's",
    "DON'T 'S 'quoted' ''double''", "a.b,c;d:e!?", "...?!?---", "$100 + 50% = <fun> ^_^ `code` |pipe|",
    "numbers 3.14159 1,000,000 2nd 21st ½ ² Ⅻ ٣٤ ४२", "email me@example.com http://x.y/z?a=b#frag",
    "  leading and trailing spaces  ", "multiple     spaces between", "tabs\t\tand\t \tmixed",
    "line one\n\nline two\r\nline three\n", "trailing newline\n\n\n", " \n \n x",
    "Ångström résumé naïve coöperate façade", "İstanbul ΣΑΣ σας ΌΣΟΣ straße", "中文字符 mixed 漢字かなカナ",
    "한국어 텍스트", "日本語のテキスト。", "emoji 😀👍🏽 ❤️ 🇫🇷", "combining e\u0301 a\u0308 n\u0303",
    "nbsp\u00a0and\u2003em\u3000ideographic space", "zero\u200bwidth\u00adsoft\ufeffbom",
    "<|endoftext|>a<|im_end|><|im_start|>", "<|im_start|<|im_end|>>", "<repo_name>x<file_sep>",
    "supercalifragilisticexpialidocious antidisestablishmentarianism", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "camelCaseWords and snake_case_words and kebab-case-words", "x=1;y=2;print(x+y)  # comment",
    "def f(a, b):\n    return a ** b\n", "C'est la vie, n'est-ce pas?", "¡Hola! ¿Qué tal? «guillemets» „quotes“",
    "— dash – en ‘single’ “double”", "€5 ° © ™ ± µ", "\u0000nul\u0007bell", "\u0085next line\u2028sep\u2029para",
    "A gripping, funny film that never lets up; its 2 leads are superb.",
    "Too long by half, and the jokes fall flat: 3/10.",
    # Bytes with no token of their own (controls 4 and 6; 0xF1, a lead byte
    # of planes 4-7) are left out, as `tokenizers` leaves them without an unk.
    "a\u0004b\u0006c", "plane \U00050000 x\U00050001y",
]


def read_metadata(path):
    """The key-value metadata of a GGUF file (its header alone)."""
    with open(path, "rb") as f:
        rd = f.read
        u32 = lambda: struct.unpack("<I", rd(4))[0]
        u64 = lambda: struct.unpack("<Q", rd(8))[0]
        text = lambda: rd(u64()).decode("utf-8")
        scalars = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

        def value(kind):
            if kind in scalars:
                fmt = scalars[kind]
                return struct.unpack(fmt, rd(struct.calcsize(fmt)))[0]
            if kind == 8:
                return text()
            if kind == 9:
                inner, n = u32(), u64()
                return [value(inner) for _ in range(n)]
            raise ValueError("gguf value type %d" % kind)

        if rd(4) != b"GGUF":
            raise SystemExit(path + ": not a GGUF file")
        u32()
        u64()
        return {text(): value(u32()) for _ in range(u64())}


def reference_tokenizer(path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    kv = read_metadata(path)
    if kv.get("tokenizer.ggml.pre") != "smollm":
        raise SystemExit(path + ": this script builds SmolLM2's pre-tokenizer, the file's is %r" % kv.get("tokenizer.ggml.pre"))
    tokens = kv["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in kv["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, kind in zip(tokens, kv["tokenizer.ggml.token_type"]) if kind in (3, 4)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def corpus_texts(path):
    if path.endswith(".csv.bz2"):
        with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
            return [" ".join(row["text"].splitlines()) for row in csv.DictReader(f)]
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--corpus")
    ap.add_argument("--accel-bench")
    a = ap.parse_args()
    import tokenizers
    tok = reference_tokenizer(a.gguf)
    if a.corpus:
        texts = corpus_texts(a.corpus)
        out = subprocess.run([a.accel_bench, "tokenize", "--tokenizer", "gguf-bpe", "--vocab", a.gguf],
                             input="\n".join(texts) + "\n", capture_output=True, text=True, check=True).stdout
        ours = out.splitlines()
        end_of_text = tok.token_to_id("<|endoftext|>")  # the CLI's documents end with it
        differ = 0
        for text, line in zip(texts, ours):
            want = tok.encode(text, add_special_tokens=False).ids + [end_of_text]
            if [int(x) for x in line.split()] != want:
                differ += 1
                if differ <= 5:
                    print("differs:", json.dumps(text), file=sys.stderr)
        print("%d texts, %d differ" % (len(texts), differ + abs(len(texts) - len(ours))))
        return 1 if differ or len(texts) != len(ours) else 0
    with open(a.gguf, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    cases = []
    for t in CASES:
        ids = tok.encode(t, add_special_tokens=False).ids
        # Whether the ids decode to the text (not where a byte has no token).
        cases.append({"text": t, "ids": ids, "decodes": tok.decode(ids, skip_special_tokens=False) == t})
    # One case a line, so a change to one reads as one line of a diff.
    print('{"tokenizers": %s, "gguf_sha256": %s, "cases": [' % (json.dumps(tokenizers.__version__), json.dumps(digest)))
    print(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
    print("]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
