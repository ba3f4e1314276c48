#!/usr/bin/env bash
# Whether -fno-math-errno changes the one-pass Adam kernel's bits: builds
# lib/kernels/adam.cpp with CMakeLists.txt's flags without it and with it,
# steps each ISA this CPU runs over 7 sizes for 5 steps (Adam and AdamW, the
# step's scalars as the optimizer makes them), and compares every p, m and v
# bit for bit. Also says whether each object's loop is vectorized (vsqrtps).
#
#   bash bench/adam_errno_bits.sh      # prints BITWISE-SAME or the difference; exit 1 if they differ
#
# Needs g++ and objdump. Writes only under a temporary folder.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;; *) echo "adam_errno_bits: error: no arguments" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/main.cpp" <<'CPP'
#include "accel/kernels/adam.h"
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
using namespace accel::kernels;
int main(int, char** argv) {
  std::FILE* f = std::fopen(argv[1], "wb");
  for (const auto& isa : adam_isas()) {
    adam_force_isa(isa);
    for (int64_t n : {1, 7, 8, 63, 64, 1000, 1 << 20}) {
      std::mt19937 rng(static_cast<unsigned>(n));
      std::normal_distribution<float> d(0, 1);
      std::vector<float> p(n), g(n), m(n), v(n);
      for (int64_t i = 0; i < n; ++i) {
        p[i] = d(rng), g[i] = d(rng) * 1e-3f, m[i] = d(rng) * 1e-4f, v[i] = std::abs(d(rng)) * 1e-7f;
      }
      for (int t = 1; t <= 5; ++t) {
        adam_step(p.data(), g.data(), m.data(), v.data(), n,
                  adam_scalars(1e-3, 0.9, 0.999, 1e-8, t % 2 ? 0.01 : 0.0, t % 2 == 1, t), 1);
      }
      for (auto* x : {&p, &m, &v}) std::fwrite(x->data(), sizeof(float), x->size(), f);
    }
    std::printf("%s ", isa.c_str());
  }
  std::fclose(f);
  std::printf("\n");
}
CPP
for flags in "" "-fno-math-errno"; do
  tag=${flags:-errno}
  g++ -std=c++17 -O3 -ffp-contract=off $flags -I"$root/lib/include" -I"$root/lib/kernels" \
    -c "$root/lib/kernels/adam.cpp" -o "$tmp/adam-$tag.o"
  g++ -std=c++17 -O2 -I"$root/lib/include" "$tmp/main.cpp" "$tmp/adam-$tag.o" -lpthread -o "$tmp/run-$tag"
  echo "adam_errno_bits: ${flags:-without -fno-math-errno}: ISAs run: $("$tmp/run-$tag" "$tmp/out-$tag.bin")," \
       "vsqrtps in the object: $(objdump -d "$tmp/adam-$tag.o" | grep -c vsqrtps || true)"
done
if cmp -s "$tmp/out-errno.bin" "$tmp/out--fno-math-errno.bin"; then
  echo "BITWISE-SAME"
else
  cmp "$tmp/out-errno.bin" "$tmp/out--fno-math-errno.bin" | head -n 1
  exit 1
fi
