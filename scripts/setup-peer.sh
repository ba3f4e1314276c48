#!/usr/bin/env bash
# Installs the text benchmark's peer (bench/text_peer.sh): Hugging Face
# transformers and Lightning Fabric, pinned, for the CUDA leg's torch
# (scripts/setup-torch-venv.sh), into a folder of their own next to that venv
# (PYTHONPATH; the venv itself, which the CUDA leg builds on, stays as its stamp
# says). Idempotent: a stamp lists the pins, so a second run reuses the folder.
#
#   scripts/setup-peer.sh          # install (or reuse); last line: PYTHON PEER_SITE
#   scripts/setup-peer.sh --where  # print PYTHON PEER_SITE of an installed peer, never download
#
# Only what `import transformers, tokenizers, lightning_fabric` and
# BertForSequenceClassification need is installed, without dependency resolution
# (--no-deps): resolving would pull the CUDA wheels that the venv's torch was
# installed without (about 3 GB). Not part of the main job or the tests:
# scripts/setup.sh --bench runs it.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { echo "setup-peer: $*" >&2; }
die() { echo "setup-peer: error: $*" >&2; exit 1; }

# --- the pins: change them together (each wheel's METADATA names what it imports) ---
PINS=(transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 huggingface_hub==2.4.0
      lightning-fabric==2.6.6 lightning-utilities==0.15.3
      numpy==2.4.6 regex==2026.11.19 PyYAML==6.0.4 tqdm==4.70.1 packaging==26.4
      httpx2==2.16.2 httpcore2==2.16.2 h11==0.16.0 anyio==4.16.0 idna==3.20 certifi==2026.10.19.post1
      truststore==0.10.5)
STAMP_FORMAT=1

where=0
case "${1:-}" in --where) where=1 ;; "") ;; *) die "unknown argument $1 (known: --where)" ;; esac

# The venv's python, from the CMake prefix setup-torch-venv.sh prints
# (VENV/lib/pythonX.Y/site-packages/torch/share/cmake).
if [ "$where" = 1 ]; then
  VENV=${ACCEL_TORCH_VENV:-}
  if [ -z "$VENV" ]; then
    for v in /opt/accel-bench/torch-venv "${XDG_CACHE_HOME:-$HOME/.cache}/accel-bench/torch-venv"; do
      [ -x "$v/bin/python" ] && VENV=$v && break
    done
  fi
  [ -n "$VENV" ] && [ -x "$VENV/bin/python" ] || die "the CUDA leg's torch venv is not installed (bash scripts/setup.sh --bench)"
else
  prefix=$(bash "$REPO/scripts/setup-torch-venv.sh" | tail -n 1)
  VENV=${prefix%/lib/python*}
  [ -x "$VENV/bin/python" ] || die "no python in $VENV (from setup-torch-venv.sh's prefix $prefix)"
fi
VENV=${VENV%/}
PEER=$VENV-peer
STAMP=$PEER/accel-bench-peer.stamp
want=$(echo "format=$STAMP_FORMAT"; printf 'pin=%s\n' "${PINS[@]}")
check() { PYTHONPATH=$PEER "$VENV/bin/python" -W ignore -c \
  'import transformers, tokenizers, lightning_fabric, safetensors.torch; from transformers import BertForSequenceClassification' 2>&1 | tail -n 1; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  [ "$where" = 1 ] || say "reusing $PEER"
elif [ "$where" = 1 ]; then
  die "the peer is not installed in $PEER (bash scripts/setup.sh --bench)"
else
  exec 9>"$PEER.lock"
  flock 9
  rm -rf "$PEER.tmp"
  say "installing ${PINS[*]} into $PEER"
  "$VENV/bin/python" -m pip install -q --no-deps --disable-pip-version-check --target "$PEER.tmp" "${PINS[@]}" \
    || die "pip install failed"
  rm -rf "$PEER" && mv "$PEER.tmp" "$PEER"
  err=$(check) || die "the installed peer does not import: $err"
  echo "$want" >"$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
  say "ready ($(du -sh "$PEER" | cut -f1))"
fi
echo "$VENV/bin/python $PEER"
