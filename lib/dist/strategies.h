// Factories of the strategies that live in their own files (internal).
#pragma once

#include <memory>

#include "accel/dist/strategy.h"

namespace accel::dist {

std::unique_ptr<Strategy> make_ddp(const StrategyOptions& options, DistContext ctx);
std::unique_ptr<Strategy> make_fsdp(const StrategyOptions& options, DistContext ctx);
std::unique_ptr<Strategy> make_zero(const StrategyOptions& options, DistContext ctx, int stage);

}  // namespace accel::dist
