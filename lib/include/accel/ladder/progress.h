// Progress of a sweep's runs, fed with the events each child `accel-bench run`
// writes on its progress channel (util/child_process.h): JSON lines
// {"event":"step",...} and {"event":"epoch",...} (train/console.h). On a terminal: one bar per run, redrawn in place
// (epoch, step, ETA, images/s), left as a one-line summary when the run ends.
// Otherwise (CI logs): plain lines, one per epoch and one per run.
// (Debian has no maintained C++ progress-bar library -- no indicators or
// tqdm.cpp package -- so this is the small one-file version.)
#pragma once

#include <chrono>
#include <ostream>
#include <string>

namespace accel::ladder {

class Progress {
 public:
  Progress(std::ostream& out, bool terminal) : out_(out), terminal_(terminal) {}

  // A run starts: label (rung and repeat), images per step, epochs planned.
  void start(const std::string& label, int batch_size, int epochs);
  // One event line from the run's progress channel; lines that are not an
  // event object are ignored (a newer run may send more kinds).
  void event(const std::string& text);
  // The run ended: a one-line summary (status, time, accuracy).
  void finish(const std::string& summary);
  // A message between runs.
  void note(const std::string& text);

  // The bar for a state; public so tests need no terminal.
  static std::string bar(const std::string& label, int epoch, int epochs, long step, long steps,
                         double eta_s, double images_per_s, int width = 20);

 private:
  using Clock = std::chrono::steady_clock;
  void redraw();

  std::ostream& out_;
  bool terminal_;
  std::string label_;
  int batch_size_ = 0, epochs_ = 0, epoch_ = 0;
  long step_ = 0, steps_ = 0;
  double images_per_s_ = 0;
  Clock::time_point started_, last_batch_time_;
  long last_batch_ = -1;
};

}  // namespace accel::ladder
