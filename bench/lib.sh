# Helpers the bench scripts share; sourced (`. bench/lib.sh`), with PYTHON and
# say() set by the caller.

# json FILE EXPR: a value from a JSON file, EXPR in Python over `d`.
json() { "${PYTHON:-python3}" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# median X...: the median of numbers.
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# warn_unless_same_libtorch BIN: says so when the accel-bench binary and
# PYTHON's torch load different LibTorch libraries (the ratio would then be a
# version comparison).
warn_unless_same_libtorch() {
  local cpp_lib py_lib
  cpp_lib=$(ldd "$1" | awk '/libtorch_cpu/ { print $3; exit }')
  py_lib=$("${PYTHON:-python3}" -W ignore -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))' 2>/dev/null)
  if [ "$(readlink -f "$cpp_lib")" != "$(readlink -f "$py_lib")" ]; then
    say "warning: accel-bench links ${cpp_lib:-?}, ${PYTHON:-python3}'s torch loads $py_lib: not the same LibTorch"
  fi
}

# openblas_coretype_of ACCEL_BENCH: where the environment sets no
# OPENBLAS_CORETYPE, the one that accel-bench CLI runs with (it sets one where
# the loaded OpenBLAS does not know this CPU and fell back to generic kernels:
# lib/include/accel/metrics/hardware.h), for binaries that do not re-execute
# themselves (accel_bench, Python) to use the same kernels; else nothing.
openblas_coretype_of() {
  [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x "$1" ] || return 0
  "$1" env | sed -n 's/^ *"openblas_coretype": "\([^"]*\)".*/\1/p'
}

# bf16_hardware: "native" where the CPU has AMX or AVX512-BF16, else "emulated".
bf16_hardware() { if grep -qiE 'amx_bf16|avx512_bf16' /proc/cpuinfo; then echo native; else echo emulated; fi; }
