// A stand-in for libnvidia-ml.so.1 with the functions accel-bench's energy
// counter opens (lib/metrics/energy.cpp), so that the counter and a run's
// energy fields are tested on a machine without a GPU
// (ACCEL_NVML_LIBRARY=<this library>). One GPU, at PCI bus id
// 0000:17:00.0, whose energy counter starts at 5,000,000 mJ and advances
// 250 mJ every time it is read. NVML_STANDIN_FAIL makes one call fail:
// "init" (nvmlInit_v2), "energy" (every energy read, as a GPU before Volta
// answers) or "energy-after-N" (the reads after the N-th).
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
int inits = 0;  // nvmlInit_v2 calls not yet shut down
unsigned long long reads = 0;
int device_token = 0;

bool failing(const char* what) {
  const char* f = std::getenv("NVML_STANDIN_FAIL");
  return f && std::strcmp(f, what) == 0;
}
}  // namespace

extern "C" {

// nvmlReturn_t values nvml.h gives these names.
enum { kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6,
       kDriverNotLoaded = 9 };

__attribute__((visibility("default"))) int nvmlInit_v2() {
  if (failing("init")) return kDriverNotLoaded;
  ++inits;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlShutdown() {
  if (inits == 0) return kUninitialized;
  --inits;
  return kSuccess;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(int rc) {
  switch (rc) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kNotFound: return "Not Found";
    case kDriverNotLoaded: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (inits == 0) return kUninitialized;
  if (!device) return kInvalidArgument;
  if (index != 0) return kNotFound;
  *device = &device_token;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (inits == 0) return kUninitialized;
  if (!bus_id || !device) return kInvalidArgument;
  if (std::strcmp(bus_id, "0000:17:00.0") != 0) return kNotFound;
  *device = &device_token;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetTotalEnergyConsumption(void* device,
                                                                               unsigned long long* mj) {
  if (inits == 0) return kUninitialized;
  if (device != &device_token || !mj) return kInvalidArgument;
  if (failing("energy")) return kNotSupported;
  if (const char* f = std::getenv("NVML_STANDIN_FAIL"); f && std::strncmp(f, "energy-after-", 13) == 0) {
    if (reads >= std::strtoull(f + 13, nullptr, 10)) return kNotSupported;
  }
  ++reads;
  *mj = 5000000ULL + 250ULL * reads;
  return kSuccess;
}

// For the tests: inits not shut down, and a fresh counter.
__attribute__((visibility("default"))) int nvml_standin_inits() { return inits; }
__attribute__((visibility("default"))) void nvml_standin_reset() { reads = 0; }

}  // extern "C"
