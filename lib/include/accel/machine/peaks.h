// Hardware peaks for MFU: published dense figures for GPUs (a data file,
// results/reference/dense-peaks.json) and this machine's measured matmul
// rate for CPUs (`accel-bench calibrate`, results/peaks/<machine-id>.json).
// MFU = flops_per_sample x 3 (forward + backward) x images/s per device / peak.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "accel/train/result.h"
#include "accel/util/json_doc.h"

namespace accel::machine {

struct Peak {
  double flops_per_s = 0;
  std::string source;  // what the figure is and where it comes from
};

// The matmul dtype a precision runs its matmuls in: fp32, bf16, fp16, fp64.
std::string matmul_dtype(const std::string& precision);

// A calibration's thread-count key ("1", "16"): its number when it is
// decimal digits only and from 1 to kMaxCalibratedThreads, else nullopt (a
// doctored "4294967297" never wraps into a small count, "2x" is no 2).
inline constexpr int kMaxCalibratedThreads = 1 << 16;
std::optional<int> thread_count_key(const std::string& key);

// Checks a calibration file (`accel-bench calibrate`'s peaks.json) field by
// field: cpu.<dtype>.<threads> positive numbers; comm.ranks an integer >= 2,
// comm.collectives.<op> with alpha_s and beta_s_per_byte numbers >= 0 and
// points [bytes > 0, seconds > 0]; comm.colocation's factors positive.
// ConfigError "FILE: comm.collectives.all_reduce.alpha_s: ..." otherwise.
void validate_calibration(const Json& doc, const std::string& file);

// A file of results/reference/ (links.json, dense-peaks.json) given by its
// relative name: as named where it exists from the current folder, else
// found beside this accel-bench's source tree (the binary in build/ or
// build-*/ of a clone), so the commands work from any folder.
std::filesystem::path reference_file(const std::filesystem::path& rel);

class PeakTable {
 public:
  // Either file may be absent (empty path or missing file): its peaks are then unknown.
  static PeakTable load(const std::filesystem::path& published,
                        const std::filesystem::path& calibration);
  // The same where the user named CALIBRATION with FLAG (`--calibration
  // FILE`): a missing file is then a ConfigError "FLAG FILE: no such file",
  // not a table without peaks.
  static PeakTable load_named(const std::filesystem::path& published, const std::filesystem::path& calibration,
                              const std::string& flag);

  // The peak of one device of this run: a GPU's published figure by its name
  // in env (gpu_name, ...), a CPU's measured figure at the run's thread count.
  std::optional<Peak> for_run(const train::RunRecord& run) const;

  // The published peak of a GPU by name ("NVIDIA H100 80GB HBM3") and dtype.
  std::optional<Peak> published(const std::string& gpu_name, const std::string& dtype) const;
  // The calibrated CPU peak for a dtype at this many threads (the largest
  // measured count not above it).
  std::optional<Peak> calibrated_cpu(const std::string& dtype, int threads) const;
  // The calibration file's document (null when none): its "comm" fit too.
  const Json& calibration() const { return calibration_; }
  // Where a precision cannot pay on this CPU, by the calibration's own
  // figures: a bf16 precision whose matmuls measured below kBf16PaysRatio x
  // fp32's at `threads` (the casts autocast adds then eat what is left).
  // "bf16 matmuls measured 161.5 GFLOP/s against fp32's 310.7 at 2 threads
  // on this CPU (accel-bench calibrate, FILE): ..."; "" when it pays, the
  // precision is not bf16, or either figure is missing.
  std::string precision_limit_note(const std::string& precision, int threads) const;

 private:
  Json published_, calibration_;
  std::string published_file_, calibration_file_;
};

// bf16 must run its matmuls at least this much faster than fp32 to pay for
// the casts bf16-mixed adds around them (a ViT step casts every weight and
// activation it multiplies): below it, bf16-mixed is expected no faster than
// 32-true.
inline constexpr double kBf16PaysRatio = 1.2;

// How far the counted matmul FLOPs of a step may lie from the analytic
// count (x 3 for training) for MFU to be printed: the analytic count leaves
// out small terms (biases, the patch embedding's input gradient it assumes,
// padded keys the attention skips), which stay well under this.
inline constexpr double kFlopsAgreement = 0.10;

// MFU of one run (analytic FLOPs x 3 x samples/s per device over one
// device's dense peak for the run's matmul dtype), or nullopt when a figure
// is missing, the precision is emulated, the run counted its step's FLOPs and
// they disagree with the analytic count by more than kFlopsAgreement, or the
// figure would exceed 100% (refused: the peak or the count is wrong).
std::optional<double> run_mfu(const train::RunRecord& run, const PeakTable& peaks);

// results/peaks/<machine-id>.json (relative to the cwd).
std::filesystem::path default_peaks_file(const std::string& machine_id);

// Writes `blocks` into the calibration file OUT, keeping what else it holds
// (calibrate's matmul peaks, calibrate --comm's fit and calibrate --noise's
// spread are each measured alone): OUT read where it exists (an input error
// naming it when it is not a JSON object), machine_id set where it has none,
// each key of `blocks` replaced, then written atomically (folders made).
void update_calibration_file(const std::filesystem::path& out, const std::string& machine_id,
                             const nlohmann::json& blocks);

}  // namespace accel::machine
