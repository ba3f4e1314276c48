#include "accel/ladder/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "accel/ladder/estimate.h"
#include "accel/train/task.h"
#include "accel/util/json_doc.h"

namespace accel::ladder {


std::string Progress::bar(const std::string& label, int epoch, int epochs, long step, long steps,
                          double eta_s, double images_per_s, int width) {
  double f = 0;
  if (epochs > 0) {
    const double in_epoch = steps > 0 ? double(step) / double(steps) : 0.0;
    f = std::clamp((double(std::max(epoch, 1) - 1) + in_epoch) / double(epochs), 0.0, 1.0);
  }
  const int filled = int(f * width + 0.5);
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-16s [%s%s] epoch %d/%d step %ld/%ld ETA %s %.0f img/s",
                label.c_str(), std::string(size_t(filled), '#').c_str(),
                std::string(size_t(width - filled), '.').c_str(), std::max(epoch, 1), epochs,
                step, steps, duration_text(eta_s).c_str(), images_per_s);
  return buf;
}

void Progress::start(const std::string& label, int batch_size, int epochs) {
  label_ = label;
  batch_size_ = batch_size;
  epochs_ = epochs;
  epoch_ = 1;
  step_ = steps_ = 0;
  images_per_s_ = 0;
  last_batch_ = -1;
  started_ = Clock::now();
  if (terminal_) {
    redraw();
  } else {
    out_ << "sweep: " << label_ << ": started (" << epochs << " epochs)" << std::endl;
  }
}

void Progress::event(const std::string& text) {
  Json ev = parse_json_or_discarded(text);
  if (!ev.is_object()) return;
  const auto kind = str_at(ev, "event");
  const int e = int(num_at(ev, "epoch").value_or(0));
  const int E = int(num_at(ev, "epochs").value_or(0));
  if (e <= 0 || E <= 0) return;
  if (kind == "step") {
    const auto b = long(num_at(ev, "batch").value_or(0));
    const auto B = long(num_at(ev, "batches").value_or(0));
    const auto now = Clock::now();
    if (e == epoch_ && last_batch_ >= 0 && b > last_batch_) {
      const double dt = std::chrono::duration<double>(now - last_batch_time_).count();
      if (dt > 0) images_per_s_ = double(b - last_batch_) * batch_size_ / dt;
    }
    epoch_ = e;
    epochs_ = E;
    step_ = b;
    steps_ = B;
    last_batch_ = b;
    last_batch_time_ = now;
    if (terminal_) redraw();
  } else if (kind == "epoch") {
    epoch_ = e;
    epochs_ = E;
    step_ = steps_;
    last_batch_ = -1;
    if (terminal_) {
      redraw();
    } else {
      // The run's metric as the event names it (a share as a percent, a loss as itself).
      train::MetricFacts metric;
      const std::string name = str_at(ev, "metric", "");
      if (!name.empty() && name.size() <= 64) metric.name = name;
      if (ev.contains("proportion") && ev["proportion"].is_boolean()) metric.proportion = ev["proportion"].get<bool>();
      auto shown = [&](const char* key) {
        const auto v = num_at(ev, key);
        return v && std::isfinite(*v) ? metric.shown(*v) : std::string("n/a");
      };
      const std::string word = metric.proportion ? "acc." : metric.name;
      out_ << "sweep: " << label_ << ": epoch " << e << "/" << E << " | train " << word << " " << shown("train_acc")
           << " | val " << word << " " << shown("val_acc") << std::endl;
    }
  }
}

void Progress::redraw() {
  double f = 0;
  if (epochs_ > 0) {
    const double in_epoch = steps_ > 0 ? double(step_) / double(steps_) : 0.0;
    f = (double(epoch_ - 1) + in_epoch) / double(epochs_);
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
  const double eta = f > 0.01 ? elapsed * (1 - f) / f : -1;
  out_ << "\r" << bar(label_, epoch_, epochs_, step_, steps_, eta, images_per_s_) << "\033[K"
       << std::flush;
}

void Progress::finish(const std::string& summary) {
  if (terminal_) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%-16s ", label_.c_str());
    out_ << "\r" << buf << summary << "\033[K" << std::endl;
  } else {
    out_ << "sweep: " << label_ << ": " << summary << std::endl;
  }
}

void Progress::note(const std::string& text) { out_ << "sweep: " << text << std::endl; }

}  // namespace accel::ladder
