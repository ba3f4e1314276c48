// ExampleSet, named inputs, and the image kind of data: its set, statistics
// and collator.
#include <array>
#include <cmath>

#include "accel/data/dataset.h"
#include "accel/util/errors.h"

namespace accel::data {

// ---- inputs ------------------------------------------------------------------------

const torch::Tensor& input(const Inputs& inputs, const std::string& name) {
  auto it = inputs.find(name);
  if (it != inputs.end()) return it->second;
  std::string have;
  for (const auto& kv : inputs) have += (have.empty() ? "" : ", ") + kv.first;
  throw std::invalid_argument("the model reads input \"" + name + "\" but the batch has " +
                              (have.empty() ? std::string("none") : have) +
                              " (a model family given another kind of data)");
}

Inputs inputs_to(const Inputs& inputs, const torch::Device& device) {
  Inputs out;
  for (const auto& [name, t] : inputs) {
    out.emplace(name, t.device() == device ? t : t.to(device, /*non_blocking=*/true));
  }
  return out;
}

int64_t batch_rows(const Inputs& inputs) {
  return inputs.empty() || !inputs.begin()->second.defined() ? 0 : inputs.begin()->second.size(0);
}

// ---- ExampleSet ---------------------------------------------------------------------

const torch::Tensor& ExampleSet::column(const std::string& name) const {
  auto it = columns.find(name);
  if (it != columns.end()) return it->second;
  std::string have;
  for (const auto& kv : columns) have += (have.empty() ? "" : ", ") + kv.first;
  throw std::invalid_argument("dataset has no column \"" + name + "\" (it has " +
                              (have.empty() ? std::string("none") : have) + ")");
}

ExampleSet ExampleSet::with_rows(const torch::Tensor& rows, torch::Tensor new_labels,
                                 int classes) const {
  ExampleSet out;
  for (const auto& [name, t] : columns) out.columns.emplace(name, t.index_select(0, rows));
  out.labels = std::move(new_labels);
  out.num_classes = classes;
  out.class_names = class_names;
  out.collator = collator;
  return out;
}

// ---- images -------------------------------------------------------------------------

namespace {

class ImageCollator : public Collator {
 public:
  ImageCollator(std::vector<float> mean, std::vector<float> std)
      : mean_(std::move(mean)), std_(std::move(std)) {}
  std::string kind() const override { return "image"; }
  Batch collate(const ExampleSet& set, const torch::Tensor& rows,
                const CollateOptions& o) const override {
    Batch b;
    b.inputs.emplace("pixels", transform_images(set.column("pixels").index_select(0, rows), mean_,
                                                std_, o.resize, o.normalize));
    return b;
  }
  nlohmann::json describe() const override { return {{"mean", mean_}, {"std", std_}}; }
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& stdev() const { return std_; }

 private:
  std::vector<float> mean_, std_;
};

}  // namespace

ExampleSet make_image_set(torch::Tensor pixels, torch::Tensor labels, int num_classes,
                          std::vector<float> mean, std::vector<float> std) {
  if (!pixels.defined() || pixels.dim() != 4 || pixels.scalar_type() != torch::kUInt8) {
    throw std::invalid_argument("make_image_set: pixels must be uint8 [N, C, H, W]");
  }
  ExampleSet s;
  s.columns.emplace("pixels", pixels.contiguous());
  s.labels = std::move(labels);
  s.num_classes = num_classes;
  s.collator = std::make_shared<ImageCollator>(std::move(mean), std::move(std));
  return s;
}

const torch::Tensor& image_pixels(const ExampleSet& set) { return set.column("pixels"); }

std::pair<std::vector<float>, std::vector<float>> image_stats(const ExampleSet& set) {
  const auto* c = dynamic_cast<const ImageCollator*>(set.collator.get());
  if (!c) throw std::invalid_argument("image_stats: not an image set");
  return {c->mean(), c->stdev()};
}

std::pair<std::vector<float>, std::vector<float>> pixel_stats(const torch::Tensor& pixels) {
  const int64_t n = pixels.size(0), c = pixels.size(1);
  const int64_t plane = pixels.size(2) * pixels.size(3);
  const auto contiguous = pixels.contiguous();
  const uint8_t* p = contiguous.data_ptr<uint8_t>();
  std::vector<float> mean(static_cast<size_t>(c), 0.0F), stdev(static_cast<size_t>(c), 1.0F);
  for (int64_t ch = 0; ch < c; ++ch) {
    std::array<int64_t, 256> hist{};
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* q = p + (i * c + ch) * plane;
      for (int64_t k = 0; k < plane; ++k) ++hist[q[k]];
    }
    double cnt = 0, sum = 0, sq = 0;
    for (int v = 0; v < 256; ++v) {
      const double x = v / 255.0, h = static_cast<double>(hist[static_cast<size_t>(v)]);
      cnt += h, sum += h * x, sq += h * x * x;
    }
    if (cnt == 0) continue;
    const double m = sum / cnt, var = std::max(0.0, sq / cnt - m * m);
    mean[static_cast<size_t>(ch)] = static_cast<float>(m);
    stdev[static_cast<size_t>(ch)] = var > 0 ? static_cast<float>(std::sqrt(var)) : 1.0F;
  }
  return {mean, stdev};
}

torch::Tensor transform_images(const torch::Tensor& u8, const std::vector<float>& mean_v,
                               const std::vector<float>& std_v, int resize, bool normalize) {
  if (u8.dim() != 4 || u8.scalar_type() != torch::kUInt8)
    throw std::invalid_argument("transform_images: expected uint8 [B, C, H, W]");
  auto x = u8.to(torch::kFloat).div_(255.0);
  if (resize > 0 && (x.size(2) != resize || x.size(3) != resize)) {
    namespace F = torch::nn::functional;
    x = F::interpolate(x, F::InterpolateFuncOptions()
                              .size(std::vector<int64_t>{resize, resize})
                              .mode(torch::kBilinear)
                              .align_corners(false));
  }
  if (normalize) {
    const int64_t c = x.size(1);
    const auto nm = static_cast<int64_t>(mean_v.size());
    if ((nm != c && nm != 1) || std_v.size() != mean_v.size())
      throw std::invalid_argument("transform_images: " + std::to_string(nm) + " means and " +
                                  std::to_string(std_v.size()) + " stds for " +
                                  std::to_string(c) + " channels");
    const auto mean = torch::from_blob(const_cast<float*>(mean_v.data()), {1, nm, 1, 1},
                                       torch::kFloat).clone();
    const auto stdev = torch::from_blob(const_cast<float*>(std_v.data()), {1, nm, 1, 1},
                                        torch::kFloat).clone();
    x.sub_(mean).div_(stdev);
  }
  return x;
}

}  // namespace accel::data
