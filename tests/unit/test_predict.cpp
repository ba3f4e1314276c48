// `accel-bench predict`'s model (accel/machine/predict.h): the alpha-beta fit,
// ring collectives, the strategies' schedules and state, and what it refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "accel/machine/predict.h"
#include "support/config_error.h"
#include "support/temp_dir.h"

using accel::Json;
using accel::OptNum;
using namespace accel::machine;
using accel_test::config_error;
using accel_test::has;

namespace {

// A transformer-like layout: an embedding unit (a lookup table), `layers`
// equal layers and a small head.
PredictBase base(int layers = 4) {
  PredictBase b;
  b.name = "base";
  b.precision = "32-true";
  b.device_kind = "cuda";
  b.forward_ms = 10;
  b.backward_ms = 20;
  b.optimizer_ms = 2;
  b.other_ms = 1;
  b.measured_step_ms = 33;
  b.batch_per_device = 16;
  b.train_samples = 1600;
  b.val_samples = 160;
  b.epochs = 1;
  b.steps = 100;
  b.train_time_s = 3.3 + 0.5;
  b.outside_steps_s = 0.5;
  b.element_bytes = 4;
  b.param_numels = {1000000};
  b.units.push_back({"embeddings", 1000000, 0});
  for (int i = 0; i < layers; ++i) {
    b.param_numels.push_back(400000);
    b.param_numels.push_back(100000);
    b.units.push_back({"layer_" + std::to_string(i), 500000, 500000});
  }
  b.param_numels.push_back(1000);
  b.units.push_back({"head", 1000, 1000});
  int64_t p = 0;
  for (auto n : b.param_numels) p += n;
  b.param_bytes = b.grad_bytes = p * 4;
  b.optimizer_bytes = p * 8;
  return b;
}

CommModel link(double gbps, double latency_us) {
  Link l{"test link", latency_us * 1e-6, gbps * 1e9, "test"};
  CommModel m;
  m.all_reduce = m.all_gather = m.reduce_scatter = l;
  m.description = "test";
  return m;
}

PredictOptions options(const std::string& strategy, const CommModel& m) {
  PredictOptions o;
  o.strategy = strategy;
  o.intra = o.inter = m;
  o.metrics_every_step = false;
  return o;
}

// The strategy's own collectives: the loss read-back left out.
std::vector<Call> strategy_calls(const std::vector<Call>& calls) {
  std::vector<Call> out;
  for (const auto& c : calls) {
    if (c.phase != "metrics") out.push_back(c);
  }
  return out;
}

double total_bytes(const std::vector<Call>& calls) {
  double b = 0;
  for (const auto& c : calls) b += c.bytes;
  return b;
}

}  // namespace

TEST_CASE("predict: the alpha-beta fit recovers known latency and bandwidth from synthetic timings") {
  const double alpha = 40e-6, beta = 1.0 / 3e9;
  std::vector<std::pair<double, double>> exact, noisy;
  int k = 0;
  for (double b = 4096; b <= 64 << 20; b *= 4, ++k) {
    const double t = alpha + b * beta;
    exact.emplace_back(b, t);
    noisy.emplace_back(b, t * (k % 2 ? 1.04 : 0.96));  // +-4%, alternating
  }
  const auto f = fit_alpha_beta(exact);
  CHECK(f.alpha_s == doctest::Approx(alpha).epsilon(1e-6));
  CHECK(f.beta_s_per_byte == doctest::Approx(beta).epsilon(1e-6));
  const auto g = fit_alpha_beta(noisy);
  CHECK(g.alpha_s == doctest::Approx(alpha).epsilon(0.1));
  CHECK(g.beta_s_per_byte == doctest::Approx(beta).epsilon(0.1));
  // Latency-free data: alpha clamps at 0 and beta still fits.
  const auto h = fit_alpha_beta({{1e6, 1e-3}, {4e6, 4e-3}, {16e6, 16e-3}});
  CHECK(h.alpha_s == doctest::Approx(0).epsilon(1e-9));
  CHECK(h.beta_s_per_byte == doctest::Approx(1e-9).epsilon(1e-6));
  CHECK(has(config_error([] { fit_alpha_beta({{1e6, 1e-3}, {1e6, 2e-3}}); }), "two message sizes"));
}

TEST_CASE("predict: ring collectives take 2(N-1) hops to all-reduce and N-1 to gather, and a fit inverts to its link") {
  const Link l{"l", 2e-6, 10e9, ""};
  const double bytes = 80e6;
  CHECK(ring_seconds(Collective::AllReduce, l, 1, bytes) == 0);
  CHECK(ring_seconds(Collective::AllReduce, l, 4, bytes) ==
        doctest::Approx(6 * (2e-6 + 20e6 / 10e9)));
  CHECK(ring_seconds(Collective::AllGather, l, 4, bytes) ==
        doctest::Approx(3 * (2e-6 + 20e6 / 10e9)));
  // What a 2-rank fit of a link's all-reduce says is that link again.
  const AlphaBeta fit{2 * 2e-6, 2.0 / (2 * 10e9)};
  const auto back = link_from_fit(Collective::AllReduce, fit, 2, "x");
  CHECK(back.latency_s == doctest::Approx(2e-6));
  CHECK(back.bytes_per_s == doctest::Approx(10e9));
  CHECK(ring_seconds(Collective::AllReduce, back, 2, bytes) == doctest::Approx(fit(bytes)));
}

TEST_CASE("predict: a calibration's own points price collectives inside its sizes and rank count, the fit elsewhere") {
  // A machine whose bandwidth falls past 16 MiB (the caches): a straight line
  // through all sizes would charge mid-sized messages the largest one's rate.
  const nlohmann::json pts = {{4096, 0.3e-3}, {16384, 4.0e-3}, {65536, 0.35e-3}, {1048576, 0.8e-3},
                              {16777216, 7e-3}, {67108864, 60e-3}};
  nlohmann::json comm = {{"backend", "gloo"}, {"ranks", 2}, {"threads_per_rank", 1}, {"collectives", nlohmann::json::object()}};
  for (const char* c : {"all_reduce", "all_gather", "reduce_scatter"}) comm["collectives"][c] = {{"points", pts}};
  const auto m = comm_model_from_calibration(comm, "peaks.json");
  const double mib = 1024 * 1024;
  // Measured sizes: their times; between them, linear.
  CHECK(m.seconds(Collective::AllGather, 2, 16 * mib) == doctest::Approx(7e-3));
  CHECK(m.seconds(Collective::AllGather, 2, 8 * mib) ==
        doctest::Approx(0.8e-3 + (7e-3 - 0.8e-3) * (7.0 / 15.0)));
  CHECK(m.seconds(Collective::AllGather, 2, 8 * mib) < ring_seconds(Collective::AllGather, m.all_gather, 2, 8 * mib));
  // 16 KiB ran slower than 64 KiB did: noise, priced as the larger one.
  CHECK(m.seconds(Collective::AllReduce, 2, 16384) == doctest::Approx(0.35e-3));
  CHECK(m.seconds(Collective::AllReduce, 2, 8192) == doctest::Approx(0.3e-3 + (0.35e-3 - 0.3e-3) * (4096.0 / 12288.0)));
  // Outside the sizes, or at another rank count: the fitted ring.
  for (const auto& [ranks, bytes] : {std::pair{2, 128 * mib}, std::pair{2, 1024.0}, std::pair{4, 8 * mib}}) {
    CHECK(m.seconds(Collective::ReduceScatter, ranks, bytes) ==
          doctest::Approx(ring_seconds(Collective::ReduceScatter, m.reduce_scatter, ranks, bytes)));
  }
  // Said in the model's description; a published link has no points.
  CHECK(has(m.description, "at 2 ranks and 4 KiB to 64 MiB their measured times"));
  const auto published = link(100, 1);
  CHECK(published.seconds(Collective::AllReduce, 2, 8 * mib) ==
        doctest::Approx(ring_seconds(Collective::AllReduce, published.all_reduce, 2, 8 * mib)));
}

TEST_CASE("predict: DDP's buckets, FSDP's and ZeRO's per-unit collectives are what the strategies issue") {
  const auto b = base(4);
  auto o = options("ddp", link(100, 1));
  o.knobs.bucket_mb = 2.0;  // 2 MiB: the head with the last layer, each other layer, the table alone
  const auto ddp = strategy_calls(step_calls(b, o, 2));
  REQUIRE(ddp.size() == 5);
  CHECK(ddp.front().bytes == doctest::Approx((1000 + 500000) * 4));
  CHECK(ddp.back().bytes == doctest::Approx(1000000 * 4));
  CHECK(total_bytes(ddp) == doctest::Approx(double(b.param_bytes)));
  for (const auto& c : ddp) CHECK(c.kind == Collective::AllReduce);

  o.strategy = "fsdp";
  o.knobs.fsdp_sharding = "FULL_SHARD";
  const auto fsdp = step_calls(b, o, 2);
  const int U = int(b.units.size());
  int gathers = 0, scatters = 0;
  for (const auto& c : fsdp) {
    gathers += c.kind == Collective::AllGather;
    scatters += c.kind == Collective::ReduceScatter;
  }
  CHECK(gathers == 2 * U - 1);  // forward, and backward but for the last unit
  CHECK(scatters == U);
  o.knobs.fsdp_sharding = "SHARD_GRAD_OP";
  CHECK(strategy_calls(step_calls(b, o, 2)).size() == size_t(2 * U));
  o.strategy = "deepspeed_stage_2";
  const auto zero = strategy_calls(step_calls(b, o, 3));  // 3 ranks: units padded to a multiple of 3
  CHECK(zero.size() == size_t(2 * U));
  CHECK(zero.back().phase == "optimizer");
  CHECK(zero.back().bytes == doctest::Approx(1002 * 4));  // the head's 1000 padded to 1002
  // Gloo has no reduce-scatter and sums bf16 in fp32.
  auto gloo = link(10, 50);
  gloo.native_reduce_scatter = false;
  gloo.bf16_reductions = false;
  auto g = options("fsdp", gloo);
  auto bf = b;
  bf.precision = "bf16-mixed";
  const auto calls = strategy_calls(step_calls(bf, g, 2));
  int gloo_scatters = 0;
  for (const auto& c : calls) {
    if (c.op != "reduce_scatter") continue;
    ++gloo_scatters;
    CHECK(c.kind == Collective::AllReduce);
  }
  CHECK(gloo_scatters > 0);  // FSDP's gradients do reach the collective
  CHECK(calls.front().bytes == doctest::Approx(1000000 * 2));  // the table gathered in bf16
  CHECK(calls.back().bytes == doctest::Approx(1000000 * 4));   // its gradient summed in fp32
}

TEST_CASE("predict: on a GPU DDP hides its all-reduces behind backward, on a CPU every one is exposed") {
  const auto b = base(4);
  const auto fast = predict(b, options("ddp", link(300, 1)), {1, 2, 4});
  CHECK(fast[0].step_ms == doctest::Approx(33));  // one device: the base's step
  CHECK(fast[0].efficiency == doctest::Approx(1));
  CHECK(fast[1].exposed_comm_ms < 0.2);  // 40 MB at 300 GB/s mostly overlaps 20 ms of backward
  CHECK(fast[2].samples_per_s > fast[1].samples_per_s);
  auto buckets = options("ddp", link(1, 10));
  buckets.knobs.bucket_mb = 2.0;
  const auto slow = predict(b, buckets, {2});
  CHECK(slow[0].exposed_comm_ms > 3);  // the last bucket (the table, 4 MB) cannot hide
  CHECK(slow[0].exposed_comm_ms < slow[0].comm_ms);
  auto cpu = link(1, 10);
  cpu.overlaps_compute = false;
  const auto serial = predict(b, options("ddp", cpu), {2});
  CHECK(serial[0].exposed_comm_ms == doctest::Approx(serial[0].comm_ms));
  CHECK(serial[0].step_ms == doctest::Approx(33 + serial[0].comm_ms));
  // A run of fewer steps per device: half the steps on 2 devices.
  CHECK(fast[1].steps == 50);
  CHECK(fast[1].train_time_s == doctest::Approx(50 * fast[1].step_ms / 1e3 + 0.25));
}

TEST_CASE("predict: CPU ranks sharing a host compute as slower as calibrate measured them, and only when they share it") {
  auto b = base(4);
  b.device_kind = "cpu";
  auto cpu = link(1, 10);
  cpu.overlaps_compute = false;
  const auto plain = predict(b, options("ddp", cpu), {1, 2});
  cpu.colocation = {2, 1.1, 1.5};
  const auto shared = predict(b, options("ddp", cpu), {1, 2});
  CHECK(shared[0].step_ms == doctest::Approx(plain[0].step_ms));  // one rank: alone, as measured
  CHECK(shared[0].compute_ms == doctest::Approx(plain[0].compute_ms));
  // Two ranks on one host: forward and backward x 1.1, the optimizer x 1.5.
  CHECK(shared[1].compute_ms == doctest::Approx(plain[1].compute_ms + 0.1 * 30 + 0.5 * 2));
  CHECK(shared[1].step_ms == doctest::Approx(plain[1].step_ms + 0.1 * 30 + 0.5 * 2));
  // Two nodes of one rank each share nothing; two of two do.
  auto nodes = options("ddp", cpu);
  nodes.nodes = 2;
  auto plain_nodes = options("ddp", link(1, 10));
  plain_nodes.intra.overlaps_compute = plain_nodes.inter.overlaps_compute = false;
  plain_nodes.nodes = 2;
  nodes.inter = plain_nodes.inter;
  CHECK(predict(b, nodes, {2})[0].compute_ms == doctest::Approx(predict(b, plain_nodes, {2})[0].compute_ms));
  CHECK(predict(b, nodes, {4})[0].compute_ms > predict(b, plain_nodes, {4})[0].compute_ms);
  // Said among the assumptions.
  std::string said;
  for (const auto& a : prediction_assumptions(b, options("ddp", cpu))) said += a + "\n";
  CHECK(has(said, "forward and backward x 1.100"));
  CHECK(has(said, "optimizer x 1.500"));
}

TEST_CASE("predict: ranks sharing a host slow an optimizer only as far as its bytes need the bandwidth they share") {
  auto b = base(4);
  b.device_kind = "cpu";
  const double traffic = 2.0 * double(b.param_bytes) + double(b.grad_bytes) + 2.0 * double(b.optimizer_bytes);
  auto cpu = link(1e6, 0);
  cpu.overlaps_compute = false;
  const auto alone = predict(b, options("ddp", cpu), {2})[0];
  // A stream of 10 GB/s alone, half of it with both ranks streaming: the
  // optimizer's bytes take longer than its measured 2 ms, and that is its time.
  cpu.colocation = {2, 1.0, 2.0, 10e9};
  const auto bound = predict(b, options("ddp", cpu), {2})[0];
  CHECK(bound.compute_ms == doctest::Approx(alone.compute_ms - 2 + traffic / 5e9 * 1e3));
  // ZeRO-2: each rank's half of the state, half the bytes.
  const auto z_alone = predict(b, options("deepspeed_stage_2", link(1e6, 0)), {2})[0];
  auto zopt = options("deepspeed_stage_2", cpu);
  CHECK(predict(b, zopt, {2})[0].compute_ms == doctest::Approx(z_alone.compute_ms - 1 + traffic / 2 / 5e9 * 1e3));
  // A bandwidth its bytes do not need: the measured 2 ms, however much the stream slowed.
  cpu.colocation = {2, 1.0, 2.0, 1000e9};
  CHECK(predict(b, options("ddp", cpu), {2})[0].compute_ms == doctest::Approx(alone.compute_ms));
  std::string said;
  for (const auto& a : prediction_assumptions(b, options("ddp", cpu))) said += a + "\n";
  CHECK(has(said, "the optimizer no faster than its"));
}

TEST_CASE("predict: the strategies' own copies cost their bytes at the memory bandwidth, on several devices only") {
  auto b = base(4);  // 3,001,000 fp32 parameters
  const double G = 3001000.0 * 4;
  const auto m = link(1e6, 0);  // collectives all but free
  // DDP: into the buckets, / N, back into .grad: three reads and three writes of the gradients.
  auto ddp = options("ddp", m);
  CHECK(copy_traffic(b, ddp, 1).total() == 0);
  const auto t = copy_traffic(b, ddp, 2);
  CHECK(t.backward == doctest::Approx(4 * G));
  CHECK(t.after_backward == doctest::Approx(2 * G));
  const auto free_copies = predict(b, ddp, {1, 2});
  ddp.copy_bytes_per_s = 6 * G / 3e-3;  // 3 ms for the six passes
  const auto charged = predict(b, ddp, {1, 2});
  CHECK(charged[0].step_ms == doctest::Approx(free_copies[0].step_ms));  // one device copies nothing
  CHECK(charged[1].copy_ms == doctest::Approx(3.0));
  CHECK(charged[1].compute_ms == doctest::Approx(free_copies[1].compute_ms + 3.0));
  CHECK(charged[1].step_ms == doctest::Approx(free_copies[1].step_ms + 3.0).epsilon(1e-6));
  // CPU ranks sharing a host copy as slowly as calibrate's stream ran with them.
  auto shared = ddp;
  shared.intra.colocation = {2, 1.0, 1.5, 0};
  shared.inter = shared.intra;
  CHECK(predict(b, shared, {2})[0].copy_ms == doctest::Approx(4.5));
  // ZeRO-2 in fp32: gradients into the flat buffers and / N, the stepped shards copied
  // for the gather (padded units, each a half on 2 ranks).
  const auto z = copy_traffic(b, options("deepspeed_stage_2", m), 2);
  CHECK(z.backward == doctest::Approx(4 * G).epsilon(1e-5));
  CHECK(z.optimizer == doctest::Approx(G).epsilon(1e-5));
  CHECK(z.forward == 0);
  // FSDP under bf16-mixed gathers 16-bit parameters and converts them: forward
  // once each unit, backward again but the last (FULL_SHARD).
  auto mixed = b;
  mixed.precision = "bf16-mixed";
  const auto f = copy_traffic(mixed, options("fsdp", m), 2);
  const double P = 3001000.0;
  CHECK(f.forward == doctest::Approx(P / 2 * 6 + P * 6).epsilon(1e-5));
  CHECK(f.backward > 4 * G);
  // Said among the assumptions, and left out where no bandwidth is known.
  std::string said, unsaid;
  for (const auto& a : prediction_assumptions(b, ddp)) said += a + "\n";
  for (const auto& a : prediction_assumptions(b, options("ddp", m))) unsaid += a + "\n";
  CHECK(has(said, "the strategy's own copies"));
  CHECK(!has(said, "copies of the gradients into and out of their buffers"));
  CHECK(has(unsaid, "copies of the gradients into and out of their buffers"));
}

TEST_CASE("predict: model state per rank is whole under DDP and divided as FSDP and ZeRO divide it") {
  const auto b = base(4);
  const double P = double(b.param_bytes), G = double(b.grad_bytes), O = double(b.optimizer_bytes);
  const auto m = link(100, 1);
  CHECK(predict(b, options("ddp", m), {4})[0].state_bytes_per_rank == doctest::Approx(P + G + O));
  CHECK(predict(b, options("fsdp", m), {4})[0].state_bytes_per_rank == doctest::Approx((P + G + O) / 4));
  CHECK(predict(b, options("deepspeed_stage_2", m), {4})[0].state_bytes_per_rank ==
        doctest::Approx(P + (G + O) / 4));
  // Stage 1 keeps only its slice of the reduced gradient too (lib/dist/fsdp.cpp).
  CHECK(predict(b, options("deepspeed_stage_1", m), {4})[0].state_bytes_per_rank ==
        doctest::Approx(P + (G + O) / 4));
  // Sharded optimizer state: a quarter of the optimizer's time.
  auto z = predict(b, options("deepspeed_stage_2", link(1e6, 0)), {4})[0];
  CHECK(z.compute_ms == doctest::Approx(10 + 20 + 0.5 + 1));
  auto priced = options("ddp", m);
  priced.price_per_device_hour = 2.0;
  const auto c = predict(b, priced, {4})[0];
  REQUIRE(c.cost.has_value());
  CHECK(*c.cost == doctest::Approx(2.0 * 4 * c.train_time_s / 3600));
}

TEST_CASE("predict: refuses what it cannot model, naming the flag or file") {
  const auto b = base(2);
  CHECK(has(config_error([&] { step_calls(b, options("horovod", link(1, 1)), 2); }), "--strategy"));
  auto o = options("ddp", link(1, 1));
  o.nodes = 3;
  CHECK(has(config_error([&] { predict(b, o, {4}); }), "does not split over --nodes 3"));
  nlohmann::json r = {{"name", "x"}, {"status", "ok"}, {"world_size", 2}};
  CHECK(has(config_error([&] { base_from_result(accel::train::run_record_of(r, "."), "r.json"); }), "a run of 2 ranks"));
  r["world_size"] = 1;
  CHECK(has(config_error([&] { base_from_result(accel::train::run_record_of(r, "."), "r.json"); }), "no step_split_ms"));
  r["status"] = "failed";
  CHECK(has(config_error([&] { base_from_result(accel::train::run_record_of(r, "."), "r.json"); }), "did not finish"));
  CHECK(has(config_error([] { comm_model_from_links({{"links", nlohmann::json::object()}}, "nvlink9"); }),
            "--link: \"nvlink9\""));

  accel_test::TempDir d;
  PredictRequest q;
  CHECK(has(config_error([&] { run_predict(q); }), "give a one-device RESULT.json"));
  q.result = (d.path / "none.json").string();
  CHECK(has(config_error([&] { run_predict(q); }), "no such file"));
  q.result.clear();
  q.article = "x.json";
  CHECK(has(config_error([&] { run_predict(q); }), "--rung"));
}

TEST_CASE("predict: the small collectives too: 16-mixed's overflow flag, sharded clipping, a GPU's loss read-back at log steps") {
  auto b = base(2);
  b.units.insert(b.units.begin() + 1, {"empty", 0, 0});  // a unit without parameters sends nothing
  auto o = options("fsdp", link(100, 1));
  o.knobs.fsdp_sharding = "NO_SHARD";
  const auto none = step_calls(b, o, 3);
  for (const auto& c : none) CHECK(c.bytes > 0);
  for (const auto& c : none) {
    if (c.unit == 0) CHECK(c.bytes == doctest::Approx(1000000 * 4));  // no padding to 3 under NO_SHARD
    CHECK(c.unit != 1);
  }
  b.precision = "16-mixed";
  b.grad_clip = 1.0;
  o.knobs.fsdp_sharding = "FULL_SHARD";
  const auto calls = step_calls(b, o, 2);
  int flags = 0, norms = 0;
  for (const auto& c : calls) {
    flags += c.bytes == 4.0;
    norms += c.bytes == 8.0;
  }
  CHECK(flags == 1);
  CHECK(norms == 1);
  auto gpu = options_for(b, "ddp");
  gpu.intra = gpu.inter = link(100, 1);
  b.log_every = 10;
  const auto ddp = step_calls(b, gpu, 2);
  CHECK(ddp.back().phase == "metrics");
  CHECK(ddp.back().per_step == doctest::Approx(0.1));
  CHECK(ddp.back().bytes == doctest::Approx(11 * 8));  // ten losses and the stop flag
  // The simulation still steps through every unit, the empty one included.
  CHECK(predict(b, o, {2})[0].step_ms > 0);
}

TEST_CASE("predict: steps at N devices keep the run's batch limits, and --nodes splits the devices") {
  auto b = base(2);
  b.limit_train_batches = 30;  // of 100 a device
  auto o = options("ddp", link(100, 1));
  const auto rows = predict(b, o, {1, 2, 8});
  CHECK(rows[0].steps == 30);
  CHECK(rows[1].steps == 30);  // 50 a rank, still cut to 30
  CHECK(rows[2].steps == 12);  // 12 a rank
  b.limit_train_batches = 0;
  b.max_steps = 40;
  CHECK(predict(b, o, {1})[0].steps == 40);
  o.nodes = 2;
  o.inter = link(25, 2);
  CHECK(predict(b, o, {1, 2, 4}).size() == 3);  // one device needs no second node
}
