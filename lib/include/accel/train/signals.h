// Stop requests (SIGTERM, SIGINT, SIGUSR1) for a graceful stop: the handler
// sets a flag the loop checks after each step; a second SIGTERM/SIGINT ends
// the process at once. install_stop_handlers is for the process entry point.
#pragma once

namespace accel::train {

void install_stop_handlers();
bool stop_signal_received();
void request_stop();  // as a signal would (tests)

}  // namespace accel::train
