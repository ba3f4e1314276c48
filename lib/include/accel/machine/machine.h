// The machine id that names a result set: what makes two runs of the same
// config comparable for speed. Hardware (GPU model and count, else CPU model
// and core count), the CPU's precision-relevant instruction sets (AMX,
// AVX512-BF16, AVX-512, AVX2: they decide whether bf16 is native or
// emulated), the LibTorch version and, with a GPU, the CUDA version.
// Examples: intel-xeon-processor-2c-amx-lt1.13.0, nvidia-h200-x8-lt2.6.0-cu12.4
#pragma once

#include <string>

#include "accel/util/json.h"

namespace accel::machine {

// The precision-relevant ISA tag of a /proc/cpuinfo "flags" line:
// "amx" > "avx512bf16" > "avx512" > "avx2" > "" (first present wins).
std::string isa_tag(const std::string& cpu_flags);

// Lower-case words joined by '-', vendor marks ("(R)", "(TM)", "CPU",
// "@ 2.20GHz", "Processor" is kept) dropped: "Intel(R) Xeon(R) Processor" ->
// "intel-xeon-processor".
std::string slug(const std::string& text);

// The id from facts: an environment block as result.json's "env" (cpu_model,
// cores, libtorch_version, gpu_count, and when present cpu_class, gpu_name /
// gpu_model / gpus[0].name / cuda_version) plus the ISA tag. A CPU machine:
// "<model name>-<class>-<cores>c-<isa>-lt<libtorch>", e.g.
// "amd-epyc-zen4-2c-avx512bf16-lt1.13.0"; an env without cpu_class (recorded
// before the class was kept) gives the id it always gave, without it
// ("amd-epyc-2c-avx512bf16-lt1.13.0"), which no machine that knows its class
// matches. A GPU machine: "<gpu>-x<count>-lt<libtorch>-cu<cuda>".
std::string machine_id(const nlohmann::json& env, const std::string& isa);

// This machine: {"id", "env" (accel::metrics::environment), "isa", "cpu_flags_of_note"}.
nlohmann::json this_machine();

}  // namespace accel::machine
