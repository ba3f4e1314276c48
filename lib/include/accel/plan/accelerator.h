// Accelerators as rows (no LibTorch): what a device kind is called, the
// process-group backend its ranks meet on and what it can do; and the facts
// of a machine that decide where a run lands. runtime.accelerator's choices,
// the one rule for "auto", the checks, the sweep's and tune's plans, the
// peaks and a result's record read these rows; a device kind is never
// compared by name elsewhere. Adding an accelerator is adding a row (and its
// device code behind accel/train/device.h).
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "accel/metrics/hardware.h"
#include "accel/util/json_doc.h"

namespace accel::plan {

// What a machine has, as planning needs it: gathered from an env block (a
// result's, or this machine's), or constructed (a test, a prediction for
// another machine).
struct MachineFacts {
  int cores = 1;                       // CPU cores this process may use
  std::map<std::string, int> devices;  // devices by accelerator kind ("cuda": 2); the CPU is always there
  metrics::CpuFeatures cpu;            // what CPU precisions run natively
  int devices_of(const std::string& kind) const;  // "cpu": 1; a kind absent: 0
};

// From an env block (metrics::environment(), a result.json's "env"):
// cores, gpu_count as the CUDA devices, cpu_features. Missing fields read as
// a machine without them (1 core, no GPU, no CPU feature).
MachineFacts facts_from_env(const Json& env);

struct AcceleratorRow {
  std::string kind;     // runtime.accelerator and the device type: "cpu", "cuda"
  std::string summary;  // one line
  std::string backend;  // the c10d backend its ranks use: "gloo", "nccl"
  bool graphs = false;         // a training step can be captured and replayed (runtime.cuda_graphs)
  bool events = false;         // steps are timed by device events
  bool pinned_memory = false;  // host batches are pinned for asynchronous copies
  // What peak_memory_bytes measures on it.
  std::string memory_record;
  // Its low precisions are judged by the CPU's instruction sets (bf16 without
  // AVX512-BF16 or AMX is emulated); others run them on their own units.
  bool host = false;
};

// Every accelerator, in registry order: cpu first, then the devices "auto"
// prefers in that order. A row's address holds while rows are added.
const std::deque<AcceleratorRow>& accelerator_catalog();
// Adds a row (an accelerator this build's device code knows); ConfigError
// when its kind is taken or empty. The registry is the process's: add rows
// before configs are read (the schema takes its choices once).
void add_accelerator(AcceleratorRow row);
// Takes a row added back (a test's); the host row stays. Pointers to it dangle.
void remove_accelerator(const std::string& kind);
// nullptr when unknown ("auto" is not a row: resolve it first).
const AcceleratorRow* find_accelerator(const std::string& kind);
// The row of a device a run recorded ("cuda:0", "cpu"): its kind before any
// ":index"; nullptr when unknown.
const AcceleratorRow* accelerator_of_device(const std::string& device);
// runtime.accelerator's choices: every row, then "auto".
std::vector<std::string> accelerator_choices();

// The one rule from runtime.accelerator to a row: a row's kind as named;
// "auto": the first row after the host that this machine has devices of,
// else the host. ConfigError "runtime.accelerator: ..." for a name that is no
// row. Whether a named device is present is the run's own check.
const AcceleratorRow& resolve_accelerator(const std::string& requested, const MachineFacts& facts);
// The same for a record read from a file: an unknown name reads as FALLBACK
// ("cpu" for records older than the rows), never an error.
std::string accelerator_kind_of(const std::string& requested, const MachineFacts& facts,
                                const std::string& fallback = "cpu");

}  // namespace accel::plan
