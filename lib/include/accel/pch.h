// Precompiled header for every target: the LibTorch frontend and the other
// heavy, stable headers. Only add headers that change never or almost never.
#pragma once

#include <torch/torch.h>

#include "accel/util/json.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
