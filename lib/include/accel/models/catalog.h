// The model families as plain facts (no LibTorch): the config schema reads
// model.arch's choices, each family's presets, weight formats and input kind
// from here, so a family is one row of the registry (lib/models/registry.cpp),
// never a second list in the schema.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "accel/util/json.h"

namespace accel::models {

struct FamilyInfo {
  std::string arch;                  // model.arch
  std::string input;                 // the data kind it reads: "image" | "text"
  std::string summary;               // one line for --explain and `presets`
  std::vector<std::string> presets;  // model.preset values; the first is the default
  std::vector<std::string> formats;  // model.init_format values besides "auto"
  // What its output is: "classes" (a head over the data's labels, or one
  // output) or "vocab" (next-token logits: language-modelling tasks only).
  std::string head = "classes";
  // Checks the dims a resolved model section gives explicitly (0 = the
  // preset's), throwing ConfigError "<where>model.<field>: ..." where
  // where({"model.heads", "model.dim"}) names the file that set the first of
  // those fields ("" for none). Cross-field rules only; ranges are the
  // schema's.
  using Where = std::function<std::string(const std::vector<std::string>& paths)>;
  void (*check)(const nlohmann::json& model, const Where& where) = nullptr;
};

// Every family, in registry order (the first is the default arch).
const std::vector<FamilyInfo>& model_catalog();
// nullptr when unknown.
const FamilyInfo* find_family(const std::string& arch);
// The family owning a preset name; nullptr when none does.
const FamilyInfo* family_of_preset(const std::string& preset);

}  // namespace accel::models
