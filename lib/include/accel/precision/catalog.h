// The precisions as plain facts (no LibTorch): Lightning's names and
// aliases, the dtype a precision computes its matmuls in, the dtype its
// parameters, gradients and optimizer state are kept in, whether it runs
// under autocast and with a GradScaler. The schema's choices, the policies
// (accel/precision/precision.h builds each Policy from its row), the peaks'
// matmul dtype, the hardware's native-or-emulated judgement, predict's
// gradient bytes, the checks and tune read these rows; a precision is never
// re-derived from its name elsewhere.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace accel::precision {

struct PrecisionInfo {
  std::string name;     // Lightning's canonical name: "bf16-mixed"
  std::string compute;  // the matmuls' dtype: "fp32" | "bf16" | "fp16" | "fp64"
  std::string params;   // parameters, gradients, optimizer state: "fp32" | "bf16" | "fp16" | "fp64"
  bool autocast = false;  // *-mixed: the forward runs under autocast in `compute`
  bool scaler = false;    // a GradScaler (16-mixed): every rank agrees on a skipped step
  // A low dtype ("bf16", "fp16") where the compute is one, else "".
  std::string low() const { return compute == "bf16" || compute == "fp16" ? compute : ""; }
};

// Every precision, in the table's order (32-true first).
const std::vector<PrecisionInfo>& precision_catalog();
// Lightning's aliases: {"16", "16-mixed"}, {"bf16", "bf16-mixed"}, {"32", ...}, {"64", ...}.
const std::vector<std::pair<std::string, std::string>>& precision_aliases();
// A row by its name or an alias; nullptr when unknown.
const PrecisionInfo* find_precision(const std::string& name_or_alias);
// The canonical names, in the table's order.
std::vector<std::string> precision_names();

}  // namespace accel::precision
