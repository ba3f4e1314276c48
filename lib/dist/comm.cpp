// Rendezvous (TCPStore) and the c10d process group behind accel::dist::Comm.
#define ACCEL_COMPAT_C10D 1
#include "accel/dist/comm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

namespace accel::dist {
namespace {

using Clock = std::chrono::steady_clock;

// First line of a c10 error, without the C++ backtrace.
std::string brief(const std::exception& e) {
  std::string msg = e.what();
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) msg = c10e->what_without_backtrace();
  const auto nl = msg.find('\n');
  return nl == std::string::npos ? msg : msg.substr(0, nl);
}

std::string seconds(std::chrono::milliseconds t) {
  return std::to_string(t.count() / 1000) + " s";
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// The address of this host's interface that routes to `master` (a UDP
// "connect" sends nothing; it only picks the route), so Gloo listens where the
// other ranks can reach it: loopback for a local job, the node's address in a
// multi-node job.
std::string local_address_towards(const std::string& master, int port) {
  if (is_loopback(master)) return "127.0.0.1";
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return "127.0.0.1";
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port > 0 ? port : 9));
  std::string result;
  if (::inet_pton(AF_INET, master.c_str(), &to.sin_addr) == 1 &&
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof(me);
    char buf[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        ::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof(buf)) != nullptr) {
      result = buf;
    }
  }
  ::close(fd);
  return result.empty() ? master : result;
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return c10d::ReduceOp::SUM;
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

// A c10d Work plus what must happen once it is done.
//
// A Gloo collective runs on c10d's worker threads, and its messages are moved
// by Gloo's socket thread; a rank that sleeps in work->wait() is woken by
// them, and each wake-up of a sleeping thread on an idle core costs tens of
// microseconds to milliseconds on a VM (the vCPU halts). With `spin` set the
// waiting thread instead polls isCompleted() and yields its core between
// polls, so the core stays awake and hands itself straight to the threads
// that do the work; after `spin` it sleeps as before (a long wait, e.g. for a
// rank writing a checkpoint, burns no more than that). bench/scaling.sh
// measures both.
struct WorkHandle : Handle::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  std::function<void()> then;
  std::string what;
  std::chrono::microseconds spin{0};
  void wait() override {
    try {
      if (spin.count() > 0) {
        const auto until = Clock::now() + spin;
        while (!work->isCompleted() && Clock::now() < until) std::this_thread::yield();
      }
      work->wait();
    } catch (const std::exception& e) {
      throw RunError(what + " failed (a peer rank died or timed out?): " + brief(e));
    }
    if (then) then();
  }
};

class C10dComm final : public Comm {
 public:
  C10dComm(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<compat::CommBackend> pg,
           const CommOptions& o)
      : store_(std::move(store)), pg_(std::move(pg)), opts_(o) {}

  int rank() const override { return opts_.rank; }
  int size() const override { return opts_.world_size; }
  std::string backend() const override { return opts_.backend; }
  std::string wait_mode() const override { return spin().count() > 0 ? "spin" : "block"; }
  bool native_reduce_scatter() const override { return opts_.backend == "nccl"; }

  Handle all_reduce(torch::Tensor& t, ReduceOp op) override {
    std::vector<at::Tensor> ts{t};
    c10d::AllreduceOptions o;
    o.reduceOp = to_c10d(op);
    auto h = handle();
    h->what = "all_reduce";
    h->work = call("all_reduce", [&] { return pg_->allreduce(ts, o); });
    if (op == ReduceOp::Mean) {
      const double n = size();
      h->then = [t, n]() mutable { t.div_(n); };
    }
    return Handle(h);
  }

  void broadcast(torch::Tensor& t, int root) override {
    std::vector<at::Tensor> ts{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    auto h = handle();
    h->what = "broadcast";
    h->work = call("broadcast", [&] { return pg_->broadcast(ts, o); });
    h->wait();
  }

  Handle all_gather(const torch::Tensor& shard, torch::Tensor& full) override {
    const int64_t n = shard.numel();
    TORCH_CHECK(full.numel() == n * size() && full.is_contiguous() && shard.is_contiguous(),
                "all_gather: full must be contiguous with size() * shard.numel() elements");
    auto h = handle();
    h->what = "all_gather";
    if (opts_.backend == "nccl") {
      auto out = full.view({-1});
      auto in = shard.view({-1});
      h->work = call("all_gather", [&] { return pg_->_allgather_base(out, in); });
    } else {
      std::vector<std::vector<at::Tensor>> outs(1);
      for (int r = 0; r < size(); ++r) outs[0].push_back(full.view({-1}).narrow(0, r * n, n));
      std::vector<at::Tensor> ins{shard.view({-1})};
      h->work = call("all_gather", [&] { return pg_->allgather(outs, ins); });
    }
    return Handle(h);
  }

  Handle reduce_scatter(torch::Tensor& full, torch::Tensor& shard, ReduceOp op) override {
    const int64_t n = shard.numel();
    TORCH_CHECK(full.numel() == n * size() && full.is_contiguous() && shard.is_contiguous(),
                "reduce_scatter: full must be contiguous with size() * shard.numel() elements");
    TORCH_CHECK(op == ReduceOp::Sum || op == ReduceOp::Mean, "reduce_scatter: Sum or Mean only");
    auto h = handle();
    h->what = "reduce_scatter";
    const double div = op == ReduceOp::Mean ? double(size()) : 1.0;
    if (native_reduce_scatter()) {
      auto out = shard.view({-1});
      auto in = full.view({-1});
      c10d::ReduceScatterOptions o;
      o.reduceOp = c10d::ReduceOp::SUM;
      h->work = call("reduce_scatter", [&] { return pg_->_reduce_scatter_base(out, in, o); });
      if (div != 1.0) h->then = [shard, div]() mutable { shard.div_(div); };
    } else {
      // Gloo: all-reduce the whole buffer, keep this rank's slice.
      std::vector<at::Tensor> ts{full};
      c10d::AllreduceOptions o;
      o.reduceOp = c10d::ReduceOp::SUM;
      h->work = call("reduce_scatter", [&] { return pg_->allreduce(ts, o); });
      const int64_t offset = int64_t(rank()) * n;
      h->then = [full, shard, offset, n, div]() mutable {
        auto mine = full.view({-1}).narrow(0, offset, n);
        if (div != 1.0) {
          shard.view({-1}).copy_(mine).div_(div);
        } else {
          shard.view({-1}).copy_(mine);
        }
      };
    }
    return Handle(h);
  }

  void barrier() override {
    auto h = handle();
    h->what = "barrier";
    h->work = call("barrier", [&] { return pg_->barrier(c10d::BarrierOptions()); });
    h->wait();
  }

  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    const std::string prefix = "accel/strings/" + std::to_string(seq_++) + "/";
    try {
      store_->set(prefix + std::to_string(rank()), std::vector<uint8_t>(mine.begin(), mine.end()));
      std::vector<std::string> all;
      for (int r = 0; r < size(); ++r) {
        const auto v = store_->get(prefix + std::to_string(r));
        all.emplace_back(v.begin(), v.end());
      }
      return all;
    } catch (const std::exception& e) {
      throw RunError("exchange through the store failed (a peer rank died?): " + brief(e));
    }
  }

 private:
  std::chrono::microseconds spin() const {
    return opts_.backend == "gloo" ? opts_.spin : std::chrono::microseconds(0);
  }
  std::shared_ptr<WorkHandle> handle() const {
    auto h = std::make_shared<WorkHandle>();
    h->spin = spin();
    return h;
  }

  template <typename F>
  c10::intrusive_ptr<c10d::Work> call(const char* what, F&& f) {
    try {
      return f();
    } catch (const std::exception& e) {
      throw RunError(std::string(what) + " failed (a peer rank died?): " + brief(e));
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<compat::CommBackend> pg_;
  CommOptions opts_;
  int64_t seq_ = 0;
};

c10::intrusive_ptr<c10d::TCPStore> open_store(const CommOptions& o, const std::string& where) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(o.master_port);
  so.isServer = o.rank == 0;
  so.numWorkers = c10::nullopt;  // joining is counted below, with a clear message
  so.waitWorkers = false;
  so.timeout = o.timeout;
  try {
    return compat::make_tcp_store(o.master_addr, so);
  } catch (const std::exception& e) {
    const std::string msg = brief(e);
    if (o.rank == 0 && (msg.find("in use") != std::string::npos ||
                        msg.find("EADDRINUSE") != std::string::npos)) {
      throw RunError(where + ": port " + std::to_string(o.master_port) +
                     " is in use (another run on it? give another MASTER_PORT or leave it unset)");
    }
    if (o.rank == 0) throw RunError(where + ": cannot host the store: " + msg);
    throw RunError(where + ": rank " + std::to_string(o.rank) +
                   " could not reach rank 0's store within " + seconds(o.timeout) + ": " + msg);
  }
}

c10::intrusive_ptr<c10d::Store> open_file_store(const CommOptions& o, const std::string& where) {
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(o.store_dir + "/store", o.world_size);
    store->setTimeout(o.timeout);
    return store;
  } catch (const std::exception& e) {
    throw RunError(where + ": cannot open the store: " + brief(e));
  }
}

// Every rank claims its rank and adds itself, then waits until all have.
void wait_for_all(c10d::Store& store, const CommOptions& o, const std::string& where) {
  const auto deadline = Clock::now() + o.timeout;
  int64_t joined = 0;
  try {
    const std::string r = std::to_string(o.rank);
    if (store.add("accel/rank/" + r, 1) > 1) {
      throw RunError(where + ": rank " + r + " is already taken by another process (two processes "
                     "were started with RANK=" + r + "); this one leaves the job");
    }
    joined = store.add("accel/joined", 1);
    while (joined < o.world_size) {
      if (Clock::now() > deadline) {
        throw RunError(where + ": only " + std::to_string(joined) + " of " +
                       std::to_string(o.world_size) + " ranks joined within " +
                       seconds(o.timeout));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      joined = store.add("accel/joined", 0);
    }
  } catch (const RunError&) {
    throw;
  } catch (const std::exception& e) {
    throw RunError(where + ": lost the store while " + std::to_string(joined) + " of " +
                   std::to_string(o.world_size) + " ranks had joined: " + brief(e));
  }
}

}  // namespace

bool backend_available(const std::string& backend) {
  if (backend == "gloo") return true;
  if (backend == "nccl") return compat::kHasNcclProcessGroup;
  return false;
}

std::unique_ptr<Comm> connect(const CommOptions& o) {
  const std::string where =
      o.store_dir.empty() ? "rendezvous at " + o.master_addr + ":" + std::to_string(o.master_port)
                          : "rendezvous in " + o.store_dir;
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw RunError(where + ": rank " + std::to_string(o.rank) + " outside world size " +
                   std::to_string(o.world_size));
  }
  if (o.master_port <= 0 || o.master_port > 65535) {
    throw RunError(where + ": no valid port");
  }
  if (!backend_available(o.backend)) {
    throw ConfigError("runtime.backend: \"" + o.backend + "\" is not in this build");
  }
  c10::intrusive_ptr<c10d::Store> store;
  if (o.store_dir.empty()) {
    store = open_store(o, where);
  } else {
    store = open_file_store(o, where);
  }
  wait_for_all(*store, o, where);
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>("pg", store);
  c10::intrusive_ptr<compat::CommBackend> pg;
  try {
    if (o.backend == "nccl") {
      pg = compat::make_nccl_backend(pg_store, o.rank, o.world_size, o.timeout);
    } else {
      const auto addr = local_address_towards(o.master_addr, o.master_port);
      pg = compat::make_gloo_backend(pg_store, o.rank, o.world_size, o.timeout, addr);
    }
  } catch (const std::exception& e) {
    throw RunError(where + ": creating the " + o.backend + " process group failed: " + brief(e));
  }
  return std::make_unique<C10dComm>(store, pg, o);
}

}  // namespace accel::dist
