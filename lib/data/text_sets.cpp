// Text datasets (text_sets.h): readers, their own splits, tokenization once
// at load, and the token collator.
#include "text_sets.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "accel/data/loader.h"  // epoch_indices: the portable seeded permutation
#include "accel/text/tokenizer.h"
#include "accel/text/tokenizers.h"
#include "accel/util/errors.h"
#include "accel/data/text_files.h"

namespace accel::data {
namespace fs = std::filesystem;

// ---- the token set and its collator --------------------------------------------------------

namespace {

class TokenCollator : public Collator {
 public:
  explicit TokenCollator(int64_t pad_id) : pad_id_(pad_id) {}
  std::string kind() const override { return "text"; }
  Batch collate(const ExampleSet& set, const torch::Tensor& rows,
                const CollateOptions& o) const override {
    const auto& all = set.column("input_ids");
    const auto lengths = set.column("length").index_select(0, rows);
    const int64_t longest = rows.numel() > 0 ? lengths.max().item<int64_t>() : 0;
    const int64_t width = o.pad_to > 0 ? o.pad_to : longest;
    if (longest > width) {
      throw std::invalid_argument("token collator: a row of " + std::to_string(longest) +
                                  " tokens does not fit the padding to " + std::to_string(width));
    }
    auto ids = all.index_select(0, rows).narrow(1, 0, std::min<int64_t>(width, all.size(1)));
    if (ids.size(1) < width) {  // fixed padding wider than the set's longest row
      ids = torch::cat({ids, torch::full({ids.size(0), width - ids.size(1)}, pad_id_, ids.options())}, 1);
    }
    Batch b;
    b.inputs.emplace("input_ids", ids.to(torch::kLong));
    b.inputs.emplace("attention_mask",
                     (torch::arange(width, torch::kInt).unsqueeze(0) < lengths.unsqueeze(1)).to(torch::kLong));
    b.tokens = lengths.sum().item<int64_t>();
    return b;
  }
  nlohmann::json describe() const override { return {{"pad_id", pad_id_}}; }

 private:
  int64_t pad_id_;
};

// Rows of seq + 1 tokens -> inputs (the first seq) and next tokens (the last
// seq, kNoTarget past a row's real tokens); a mask only where a row is padded, so
// packed windows run the attention without one.
class StreamCollator : public Collator {
 public:
  StreamCollator(int64_t pad_id, nlohmann::json facts) : pad_id_(pad_id), facts_(std::move(facts)) {}
  std::string kind() const override { return "tokens"; }
  Batch collate(const ExampleSet& set, const torch::Tensor& rows, const CollateOptions&) const override {
    const auto ids = set.column("input_ids").index_select(0, rows).to(torch::kLong);
    const auto lengths = set.column("length").index_select(0, rows).to(torch::kLong).unsqueeze(1);
    const int64_t seq = ids.size(1) - 1;
    const auto positions = torch::arange(seq, torch::kLong).unsqueeze(0);
    const auto predicted = (positions + 1) < lengths;  // position j predicts token j + 1
    Batch b;
    b.inputs.emplace("input_ids", ids.narrow(1, 0, seq).contiguous());
    if (rows.numel() > 0 && lengths.min().item<int64_t>() <= seq) {
      b.inputs.emplace("attention_mask", (positions < lengths).to(torch::kLong));
    }
    b.y = ids.narrow(1, 1, seq).masked_fill(predicted.logical_not(), kNoTarget).contiguous();
    b.tokens = predicted.sum().item<int64_t>();
    return b;
  }
  nlohmann::json describe() const override {
    auto d = facts_;
    d["pad_id"] = pad_id_;
    return d;
  }

 private:
  int64_t pad_id_;
  nlohmann::json facts_;
};

}  // namespace

ExampleSet make_token_stream_set(const std::vector<std::vector<int32_t>>& documents, int64_t seq,
                                 bool packed, int64_t pad_id, int64_t vocab_size) {
  if (seq < 1) throw std::invalid_argument("token stream: sequence length " + std::to_string(seq) + " (needs >= 1)");
  const int64_t width = seq + 1;
  std::vector<int32_t> flat;  // packed: the stream; documents: the rows, padded
  std::vector<int32_t> lengths;
  int64_t dropped = 0, docs = 0;
  for (const auto& d : documents) {
    if (d.empty()) continue;
    ++docs;
    if (packed) {
      flat.insert(flat.end(), d.begin(), d.end());
      continue;
    }
    if (d.size() < 2) {  // nothing to predict
      dropped += int64_t(d.size());
      continue;
    }
    const int64_t n = std::min<int64_t>(int64_t(d.size()), width);
    flat.insert(flat.end(), d.begin(), d.begin() + n);
    flat.insert(flat.end(), size_t(width - n), int32_t(pad_id));
    lengths.push_back(int32_t(n));
    dropped += int64_t(d.size()) - n;
  }
  if (packed) {
    // Window i is stream[i seq, i seq + seq + 1): consecutive windows share a
    // token, so every token after the first is predicted exactly once.
    const int64_t windows = flat.size() > 1 ? (int64_t(flat.size()) - 1) / seq : 0;
    std::vector<int32_t> rows;
    rows.reserve(size_t(windows * width));
    for (int64_t w = 0; w < windows; ++w) {
      rows.insert(rows.end(), flat.begin() + w * seq, flat.begin() + w * seq + width);
      lengths.push_back(int32_t(width));
    }
    dropped = int64_t(flat.size()) - (windows > 0 ? windows * seq + 1 : 0);
    flat = std::move(rows);
  }
  const auto n = int64_t(lengths.size());
  auto ids = torch::empty({n, width}, torch::kInt);
  std::copy(flat.begin(), flat.end(), ids.data_ptr<int32_t>());
  auto len = torch::empty({n}, torch::kInt);
  std::copy(lengths.begin(), lengths.end(), len.data_ptr<int32_t>());
  ExampleSet s;
  s.columns.emplace("input_ids", ids);
  s.columns.emplace("length", len);
  s.labels = torch::zeros({n}, torch::kLong);
  s.num_classes = int(vocab_size);
  s.collator = std::make_shared<StreamCollator>(
      pad_id, nlohmann::json{{"packing", packed ? "packed" : "documents"},
                             {"documents", docs},
                             {"dropped_tokens", dropped}});
  return s;
}

nlohmann::json token_stream_facts(const ExampleSet& set) {
  if (!set.collator || set.collator->kind() != "tokens") {
    throw std::invalid_argument("token_stream_facts: not a token-stream set (" + set.kind() + ")");
  }
  auto d = set.collator->describe();  // of the documents it was made from
  d.erase("pad_id");
  d["windows"] = set.size();  // of this set (a subset has fewer)
  d["tokens"] = set.size() > 0 ? set.column("length").sum().item<int64_t>() : 0;
  return d;
}

ExampleSet make_token_set(const std::vector<std::vector<int32_t>>& rows, torch::Tensor labels,
                          int num_classes, std::vector<std::string> class_names, int64_t pad_id) {
  size_t longest = 0;
  for (const auto& r : rows) longest = std::max(longest, r.size());
  auto ids = torch::full({int64_t(rows.size()), int64_t(longest)}, pad_id, torch::kInt);
  auto lengths = torch::empty({int64_t(rows.size())}, torch::kInt);
  auto* ip = ids.data_ptr<int32_t>();
  auto* lp = lengths.data_ptr<int32_t>();
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i].begin(), rows[i].end(), ip + i * longest);
    lp[i] = int32_t(rows[i].size());
  }
  ExampleSet s;
  s.columns.emplace("input_ids", ids);
  s.columns.emplace("length", lengths);
  s.labels = std::move(labels);
  s.num_classes = num_classes;
  s.class_names = std::move(class_names);
  s.collator = std::make_shared<TokenCollator>(pad_id);
  return s;
}

namespace detail {
namespace {

[[noreturn]] void fail(const std::string& at, const std::string& what) { throw DataError(at + ": " + what); }

torch::Tensor label_tensor(const std::vector<int64_t>& labels) {
  auto t = torch::empty({int64_t(labels.size())}, torch::kLong);
  std::copy(labels.begin(), labels.end(), t.data_ptr<int64_t>());
  return t;
}

// Rows of `from` at `idx`, in that order.
TextRows pick(const TextRows& from, const std::vector<int64_t>& idx) {
  TextRows out;
  out.class_names = from.class_names;
  for (int64_t i : idx) {
    out.add(from.texts[size_t(i)], from.labels[size_t(i)], from.where[size_t(i)], from.groups[size_t(i)]);
  }
  return out;
}

// A CSV file's header -> column index, DataError when a wanted one is missing.
size_t column(const CsvRecord& header, const std::string& name, const fs::path& file,
              const std::string& field) {
  for (size_t i = 0; i < header.fields.size(); ++i) {
    if (header.fields[i] == name) return i;
  }
  std::string have;
  for (const auto& f : header.fields) have += (have.empty() ? "" : ", ") + f;
  throw DataError(file.string() + ":" + std::to_string(header.line) + ": no column \"" + name +
                  "\" (" + field + ") in the header; the columns are " + have);
}

std::vector<CsvRecord> read_csv(const fs::path& file) {
  std::string text = read_file_bytes(file);
  // A UTF-8 byte-order mark (spreadsheet exports write one) is not part of
  // the first column's name.
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  auto records = parse_csv(text, file.string());
  if (records.empty()) throw DataError(file.string() + ": empty (no header row)");
  return records;
}

const std::string& field_of(const CsvRecord& r, size_t col, const CsvRecord& header,
                            const fs::path& file) {
  if (r.fields.size() != header.fields.size()) {
    fail(file.string() + ":" + std::to_string(r.line),
         std::to_string(r.fields.size()) + " fields, but the header has " +
             std::to_string(header.fields.size()));
  }
  return r.fields[col];
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

// A label as a class name: valid UTF-8 (it lands in result.json), without
// the whitespace around it (" pos" and "pos" are one class).
std::string label_name(const std::string& raw, const std::string& where, const std::string& column) {
  try {
    text::decode_utf8(raw);
  } catch (const text::Utf8Error& e) {
    fail(where, "the label (column \"" + column + "\") is not valid UTF-8: " + e.what());
  }
  const auto first = raw.find_first_not_of(" \t\r\n\f\v");
  if (first == std::string::npos) return "";
  const auto last = raw.find_last_not_of(" \t\r\n\f\v");
  return raw.substr(first, last - first + 1);
}

}  // namespace

// ---- rotten tomatoes -------------------------------------------------------------------------

TextSplits read_rotten_tomatoes(const config::DataConfig& cfg, const fs::path& file) {
  const auto records = read_csv(file);
  const auto& header = records.front();
  const size_t c_cat = column(header, "category", file, "the label");
  const size_t c_text = column(header, "text", file, "the snippet");
  const size_t c_movie = column(header, "movie_name", file, "the movie");
  TextRows all;
  all.class_names = {"rotten", "fresh"};
  int64_t plots = 0;
  for (size_t r = 1; r < records.size(); ++r) {
    const auto& rec = records[r];
    const std::string at = file.string() + ":" + std::to_string(rec.line);
    const std::string& cat = field_of(rec, c_cat, header, file);
    if (cat == "plot") {  // a plot summary, not a review
      ++plots;
      continue;
    }
    if (cat != "fresh" && cat != "rotten") {
      fail(at, "category \"" + cat + "\" is none of fresh, rotten, plot");
    }
    const std::string& text = field_of(rec, c_text, header, file);
    if (blank(text)) fail(at, "a review row with no text");
    all.add(text, cat == "fresh" ? 1 : 0, at, field_of(rec, c_movie, header, file));
  }
  if (all.size() == 0) throw DataError(file.string() + ": no fresh or rotten review rows");

  // Movies in a seeded order; whole movies go to test, then validation, then
  // train, so no movie's snippets are in two splits.
  std::map<std::string, std::vector<int64_t>> by_movie;
  for (size_t i = 0; i < all.size(); ++i) by_movie[all.groups[i]].push_back(int64_t(i));
  std::vector<std::string> movies;
  for (const auto& kv : by_movie) movies.push_back(kv.first);  // sorted: the map's order
  const auto order = epoch_indices(int64_t(movies.size()), true, cfg.split_seed, 0, 0, 1);
  const auto n = int64_t(all.size());
  const auto want_test = int64_t(std::llround(cfg.test_fraction * double(n)));
  std::vector<int64_t> test, val, train;
  std::set<std::string> test_movies, val_movies;
  size_t k = 0;
  for (; k < order.size() && int64_t(test.size()) < want_test; ++k) {
    const auto& m = movies[size_t(order[k])];
    test_movies.insert(m);
    for (auto i : by_movie[m]) test.push_back(i);
  }
  const auto want_val = int64_t(std::llround(cfg.val_fraction * double(n - int64_t(test.size()))));
  for (; k < order.size() && int64_t(val.size()) < want_val; ++k) {
    const auto& m = movies[size_t(order[k])];
    val_movies.insert(m);
    for (auto i : by_movie[m]) val.push_back(i);
  }
  for (; k < order.size(); ++k) {
    for (auto i : by_movie[movies[size_t(order[k])]]) train.push_back(i);
  }
  for (auto* v : {&test, &val, &train}) std::sort(v->begin(), v->end());  // file order
  TextSplits s;
  s.train = pick(all, train);
  s.val = pick(all, val);
  s.test = pick(all, test);
  s.info = {{"movies", movies.size()},
            {"movies_per_split",
             {{"train", movies.size() - test_movies.size() - val_movies.size()},
              {"val", val_movies.size()},
              {"test", test_movies.size()}}},
            {"plot_rows_left_out", plots},
            {"split", "by movie, data.split_seed " + std::to_string(cfg.split_seed)}};
  return s;
}

// ---- imdb --------------------------------------------------------------------------------

fs::path imdb_dir(const fs::path& root) {
  std::error_code ec;
  if (fs::is_directory(root / "aclImdb", ec)) return root / "aclImdb";
  return root;
}

TextSplits read_imdb(const config::DataConfig& cfg, const fs::path& root) {
  const fs::path dir = imdb_dir(root);
  TextRows all;
  all.class_names = {"neg", "pos"};
  for (const char* split : {"train", "test"}) {
    for (const char* polarity : {"neg", "pos"}) {
      const fs::path folder = dir / split / polarity;
      std::vector<fs::path> files;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(folder, ec)) {
        if (e.path().extension() == ".txt") files.push_back(e.path());
      }
      if (ec) throw DataError(folder.string() + ": cannot list: " + ec.message());
      std::sort(files.begin(), files.end());  // a fixed order on every file system
      for (const auto& f : files) {
        std::string text = read_file_bytes(f, int64_t{1} << 24);
        if (blank(text)) fail(f.string(), "an empty review");
        all.add(std::move(text), std::string(polarity) == "pos" ? 1 : 0, f.string() + ":1");
      }
    }
  }
  if (all.size() == 0) throw DataError(dir.string() + ": no reviews under {train,test}/{pos,neg}/*.txt");
  // As the blog's local_dataset_utilities: every review pooled and shuffled,
  // then train, validation and test taken in that order.
  const auto n = int64_t(all.size());
  const auto order = epoch_indices(n, true, cfg.split_seed, 0, 0, 1);
  const auto n_test = int64_t(std::llround(cfg.test_fraction * double(n)));
  const auto n_val = int64_t(std::llround(cfg.val_fraction * double(n - n_test)));
  const int64_t n_train = n - n_test - n_val;
  if (n_train <= 0) throw ConfigError("data: no imdb training reviews left after the test and val splits");
  TextSplits s;
  s.train = pick(all, {order.begin(), order.begin() + n_train});
  s.val = pick(all, {order.begin() + n_train, order.begin() + n_train + n_val});
  s.test = pick(all, {order.begin() + n_train + n_val, order.end()});
  s.info = {{"split", "pooled, shuffled by data.split_seed " + std::to_string(cfg.split_seed)}};
  return s;
}

// ---- your own CSV --------------------------------------------------------------------------

TextSplits read_text_csv(const config::DataConfig& cfg) {
  TextSplits s;
  std::map<std::string, int64_t> classes;  // name -> class, from the training file
  auto read = [&](const fs::path& file, bool training) {
    const auto records = read_csv(file);
    const auto& header = records.front();
    const size_t c_text = column(header, cfg.text_column, file, "data.text_column");
    const size_t c_label = column(header, cfg.label_column, file, "data.label_column");
    std::vector<std::pair<std::string, std::string>> rows;  // text, label name
    std::vector<std::string> at;
    for (size_t r = 1; r < records.size(); ++r) {
      const auto& rec = records[r];
      const std::string where = file.string() + ":" + std::to_string(rec.line);
      const std::string& text = field_of(rec, c_text, header, file);
      const std::string label =
          label_name(field_of(rec, c_label, header, file), where, cfg.label_column);
      if (blank(text)) fail(where, "a row with no text (column \"" + cfg.text_column + "\")");
      if (label.empty()) fail(where, "a row with no label (column \"" + cfg.label_column + "\")");
      rows.emplace_back(text, label);
      at.push_back(where);
    }
    if (rows.empty()) throw DataError(file.string() + ": no rows after the header");
    if (training) {
      for (const auto& r : rows) classes.emplace(r.second, 0);
      int64_t k = 0;
      for (auto& kv : classes) kv.second = k++;  // sorted names -> 0..k-1
    }
    TextRows out;
    for (const auto& kv : classes) out.class_names.push_back(kv.first);
    for (size_t i = 0; i < rows.size(); ++i) {
      auto it = classes.find(rows[i].second);
      if (it == classes.end()) {
        std::string names;
        for (const auto& kv : classes) names += (names.empty() ? "" : ", ") + kv.first;
        fail(at[i], "label \"" + rows[i].second + "\" is not a label of the training file (" + names + ")");
      }
      out.add(rows[i].first, it->second, at[i]);
    }
    return out;
  };
  s.train = read(cfg.train_file, true);
  s.test = read(cfg.test_file, false);
  s.info = {{"train_file", cfg.train_file}, {"test_file", cfg.test_file}};
  return s;
}

// ---- tokenization ---------------------------------------------------------------------------

Tokenized tokenize_splits(const config::DataConfig& cfg, const TextSplits& splits,
                          const fs::path& vocab_file, nlohmann::json& info) {
  text::TokenizerSpec spec;
  spec.vocab = vocab_file;
  spec.lowercase = cfg.lowercase;
  const auto tok = text::tokenizer_row(cfg.tokenizer).make(spec);
  const int64_t pad = tok->pad_id();
  int64_t truncated = 0, max_id = -1, tokens = 0, rows_seen = 0;
  std::vector<int64_t> lengths;
  auto make = [&](const TextRows& rows) {
    std::vector<std::vector<int32_t>> ids(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      try {
        ids[i] = tok->encode(rows.texts[i]);
      } catch (const text::Utf8Error& e) {
        fail(rows.where[i], e.what());
      }
      if (int64_t(ids[i].size()) > cfg.max_length) {
        ++truncated;
        tok->truncate(ids[i], cfg.max_length);
      }
      for (int32_t v : ids[i]) max_id = std::max<int64_t>(max_id, v);
      tokens += int64_t(ids[i].size());
      lengths.push_back(int64_t(ids[i].size()));
      ++rows_seen;
    }
    return make_token_set(ids, label_tensor(rows.labels), int(rows.class_names.size()),
                          rows.class_names, pad);
  };
  Tokenized t;
  t.train = make(splits.train);
  if (splits.val) t.val = make(*splits.val);
  t.test = make(splits.test);
  std::sort(lengths.begin(), lengths.end());
  const auto pct = [&](double q) {
    return lengths.empty() ? int64_t(0) : lengths[size_t(q * double(lengths.size() - 1))];
  };
  info["tokenizer"] = tok->label();
  info["vocab"] = vocab_file.string();
  info["vocab_sha256"] = text::file_sha256(vocab_file);
  info["vocab_size"] = tok->vocab_size();
  info["pad_id"] = pad;
  info["max_length"] = cfg.max_length;
  info["max_token_id"] = max_id;
  info["truncated"] = truncated;
  info["tokens_per_text"] = {{"mean", rows_seen ? double(tokens) / double(rows_seen) : 0.0},
                             {"p50", pct(0.5)}, {"p99", pct(0.99)}, {"max", pct(1.0)}};
  return t;
}

TextRows cap_text_rows(const TextRows& rows, int64_t cap, uint64_t seed) {
  const auto n = int64_t(rows.size());
  if (cap <= 0 || cap >= n) return rows;
  // The rows as an ExampleSet of their indices and labels, so the rule is cap_balanced's own.
  ExampleSet index;
  index.columns.emplace("row", torch::arange(n, torch::kLong));
  index.labels = torch::tensor(rows.labels, torch::kLong);
  index.num_classes = int(std::max<size_t>(rows.class_names.size(), 1));
  const auto kept = cap_balanced(index, cap, seed).column("row").contiguous();
  TextRows out;
  out.class_names = rows.class_names;
  const int64_t* p = kept.data_ptr<int64_t>();
  for (int64_t i = 0; i < kept.numel(); ++i) {
    const auto r = size_t(p[i]);
    out.add(rows.texts[r], rows.labels[r], rows.where[r], rows.groups[r]);
  }
  return out;
}

Tokenized token_stream_splits(const config::DataConfig& cfg, const TextSplits& splits,
                              const fs::path& vocab_file, nlohmann::json& info) {
  text::TokenizerSpec spec;
  spec.vocab = vocab_file;
  spec.lowercase = cfg.lowercase;
  const auto tok = text::tokenizer_row(cfg.tokenizer).make(spec);
  const bool packed = cfg.packing == "packed";
  int64_t max_id = -1;
  nlohmann::json facts = nlohmann::json::object();
  auto make = [&](const TextRows& rows, const char* name, bool packed) {
    std::vector<std::vector<int32_t>> docs(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      try {
        docs[i] = tok->encode(rows.texts[i]);
      } catch (const text::Utf8Error& e) {
        fail(rows.where[i], e.what());
      }
      for (int32_t v : docs[i]) max_id = std::max<int64_t>(max_id, v);
    }
    auto set = make_token_stream_set(docs, cfg.max_length, packed, tok->pad_id(), tok->vocab_size());
    facts[name] = token_stream_facts(set);
    return set;
  };
  Tokenized t;
  // Packing is how training fills its rows; validation and test are always
  // a document a row, so every packing is scored on the same predictions
  // (a packed window would also predict across a document's edge).
  t.train = make(splits.train, "train", packed);
  if (splits.val) t.val = make(*splits.val, "val", false);
  t.test = make(splits.test, "test", false);
  info["tokenizer"] = tok->label();
  info["vocab"] = vocab_file.string();
  info["vocab_sha256"] = text::file_sha256(vocab_file);
  info["vocab_size"] = tok->vocab_size();
  info["pad_id"] = tok->pad_id();
  info["max_length"] = cfg.max_length;
  info["max_token_id"] = max_id;
  info["packing"] = cfg.packing;
  info["token_streams"] = facts;
  return t;
}

// ---- synthetic tokens -----------------------------------------------------------------------

ExampleSet make_synthetic_text(int64_t n, int64_t max_length, uint64_t seed) {
  // splitmix64, as the synthetic images: identical on every toolchain.
  uint64_t state = seed;
  auto next = [&] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  const int64_t longest = std::max<int64_t>(4, std::min<int64_t>(max_length, 64));
  std::vector<std::vector<int32_t>> rows(size_t(std::max<int64_t>(n, 0)));
  std::vector<int64_t> labels(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const int c = int(i % 2);
    labels[i] = c;
    const int64_t body = 2 + int64_t(next() % uint64_t(longest - 3));
    auto& r = rows[i];
    r.push_back(101);  // [CLS]
    for (int64_t j = 0; j < body; ++j) {
      // A quarter of the tokens mark the class (50 ids per class, 2000..2099),
      // the rest are noise from ids no marker uses.
      const bool marker = next() % 4 == 0;
      r.push_back(marker ? int32_t(2000 + 50 * c + int64_t(next() % 50))
                         : int32_t(3000 + int64_t(next() % 26000)));
    }
    r.push_back(102);  // [SEP]
  }
  return make_token_set(rows, label_tensor(labels), 2, {"0", "1"}, 0);
}

}  // namespace detail
}  // namespace accel::data
