// The byte-level BPE a GGUF file carries in its metadata (bpe.h), read with
// the GGUF header reader (accel/util/gguf_header.h).
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "accel/text/bpe.h"
#include "accel/util/errors.h"
#include "accel/util/gguf_header.h"

namespace accel::text {

std::unique_ptr<ByteLevelBpe> gguf_bpe(const std::filesystem::path& file) {
  const auto gguf = read_gguf_header(file);
  const std::string where = file.string() + ": gguf tokenizer: ";
  auto meta = [&](const std::string& key) -> const nlohmann::json* {
    const auto it = gguf.metadata.find(key);
    return it == gguf.metadata.end() ? nullptr : &it->second;
  };
  const auto* model = meta("tokenizer.ggml.model");
  if (model == nullptr) throw ConfigError(where + "the file carries no tokenizer (tokenizer.ggml.model)");
  if (*model != "gpt2") {
    throw ConfigError(where + "tokenizer.ggml.model \"" + (model->is_string() ? model->get<std::string>() : model->dump()) +
                      "\" is not read; a byte-level BPE (\"gpt2\") is");
  }
  auto strings = [&](const char* key) {
    const auto* v = meta(key);
    if (v == nullptr || !v->is_array()) throw ConfigError(where + "no " + std::string(key) + " array");
    std::vector<std::string> out;
    out.reserve(v->size());
    for (const auto& s : *v) {
      if (!s.is_string()) throw ConfigError(where + std::string(key) + " holds a value that is not a string");
      out.push_back(s.get<std::string>());
    }
    return out;
  };
  BpeVocabulary v;
  v.source = file.string();
  v.tokens = strings("tokenizer.ggml.tokens");
  v.merges = strings("tokenizer.ggml.merges");
  const auto* pre = meta("tokenizer.ggml.pre");
  const std::string pre_name = pre != nullptr && pre->is_string() ? pre->get<std::string>() : "default";
  if (pre_name == "smollm") {
    v.pre = BpePre::Smollm;
  } else if (pre_name == "gpt-2" || pre_name == "gpt2") {
    v.pre = BpePre::Gpt2;
  } else {
    throw ConfigError(where + "pre-tokenizer \"" + pre_name + "\" (tokenizer.ggml.pre) is not read; \"smollm\" and \"gpt-2\" are");
  }
  // Control (3) and user-defined (4) tokens are matched as written, as
  // llama.cpp and `tokenizers`' added tokens match them.
  if (const auto* types = meta("tokenizer.ggml.token_type"); types != nullptr && types->is_array()) {
    if (types->size() != v.tokens.size()) {
      throw ConfigError(where + "tokenizer.ggml.token_type has " + std::to_string(types->size()) + " entries for " +
                        std::to_string(v.tokens.size()) + " tokens");
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const auto& t = (*types)[i];
      if (t.is_number_integer() && (t.get<int64_t>() == 3 || t.get<int64_t>() == 4)) v.specials.push_back(v.tokens[i]);
    }
  }
  auto id = [&](const char* key) -> int32_t {
    const auto* x = meta(key);
    if (x == nullptr) return -1;
    if (!x->is_number_integer() || x->get<int64_t>() < 0 || x->get<int64_t>() >= int64_t(v.tokens.size())) {
      throw ConfigError(where + std::string(key) + " is not a token id");
    }
    return int32_t(x->get<int64_t>());
  };
  // Documents end with the end-of-text token where the vocabulary has one
  // (GPT-2's and SmolLM2's separator in pretraining), else with the EOS id.
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i] == "<|endoftext|>") v.end_of_text = int32_t(i);
  }
  if (v.end_of_text < 0) v.end_of_text = id("tokenizer.ggml.eos_token_id");
  v.pad = id("tokenizer.ggml.padding_token_id");
  if (const auto* add_bos = meta("tokenizer.ggml.add_bos_token"); add_bos != nullptr && add_bos->is_boolean() && *add_bos) {
    v.bos = id("tokenizer.ggml.bos_token_id");
    if (v.bos < 0) throw ConfigError(where + "tokenizer.ggml.add_bos_token is true, but the file names no bos_token_id");
  }
  try {
    return std::make_unique<ByteLevelBpe>(std::move(v));
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
}

}  // namespace accel::text
