// Stop requests from signals (accel/train/signals.h).
#include "accel/train/signals.h"

#include <atomic>
#include <signal.h>

#include <csignal>
#include <initializer_list>

namespace accel::train {

namespace {
std::atomic<int> g_stop_signals{0};

extern "C" void on_stop_signal(int sig) {
  const int n = g_stop_signals.fetch_add(1) + 1;
  if (n >= 2 && sig != SIGUSR1) {
    // The second request: stop now, as the default action would.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

bool stop_signal_received() { return g_stop_signals.load() > 0; }
void request_stop() { g_stop_signals.fetch_add(1); }

}  // namespace accel::train
