// Rendezvous (a FileStore, accel-bench's own store or torchrun's TCPStore)
// and the c10d process group behind accel::dist::Comm.
#define ACCEL_COMPAT_C10D 1
#include "accel/dist/comm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "accel/dist/net_store.h"
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

// accel-bench's store (accel/dist/net_store.h) as a c10d::Store, for the
// rendezvous and for Gloo's and NCCL's address exchange. One connection,
// locked: c10d may call from its threads.
class NetC10dStore final : public c10d::Store {
 public:
  explicit NetC10dStore(const NetStoreOptions& o)
      : c10d::Store(o.timeout), client_(std::make_unique<NetStoreClient>(o)) {}

 private:
  // c10d's setTimeout (StoreTimeoutGuard, from any thread) writes timeout_
  // unlocked, as it does for c10d's own stores; it is read under the lock.
  template <typename F>
  auto locked(F&& f) -> decltype(f()) {
    std::lock_guard<std::mutex> lock(mu_);
    client_->set_timeout(timeout_);
    return f();
  }
  std::mutex mu_;
  std::unique_ptr<NetStoreClient> client_;

 public:

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    locked([&] { client_->set(key, value); });
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return locked([&] { return client_->compare_set(key, expected, desired); });
  }
  std::vector<uint8_t> get(const std::string& key) override {
    return locked([&] { return client_->get(key); });
  }
  int64_t add(const std::string& key, int64_t value) override {
    return locked([&] { return client_->add(key, value); });
  }
  bool deleteKey(const std::string& key) override {
    return locked([&] { return client_->delete_key(key); });
  }
  bool check(const std::vector<std::string>& keys) override {
    return locked([&] { return client_->check(keys); });
  }
  int64_t getNumKeys() override {
    return locked([&] { return client_->num_keys(); });
  }
  void wait(const std::vector<std::string>& keys) override {
    locked([&] { client_->wait(keys, timeout_); });
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    locked([&] { client_->wait(keys, timeout); });
  }
  // 2.7+ declare clone() (a second connection to the same store) pure
  // virtual; this overrides it there and is an ordinary member before.
  c10::intrusive_ptr<c10d::Store> clone() {
    const auto o = locked([&] { return client_->options(); });
    return c10::make_intrusive<NetC10dStore>(o);
  }
};

// What a rank met the others through: the store, and the server rank 0 hosts
// for accel-bench's store (it outlives the process group that uses it).
struct Rendezvous {
  std::unique_ptr<NetStoreServer> server;
  c10::intrusive_ptr<c10d::Store> store;
  std::string where;
  std::string warning;  // the store listened on the network unauthenticated
};

class C10dComm final : public Comm {
 public:
  C10dComm(Rendezvous rv, c10::intrusive_ptr<compat::CommBackend> pg, const CommOptions& o)
      : server_(std::move(rv.server)),
        store_(std::move(rv.store)),
        pg_(std::move(pg)),
        opts_(o),
        where_(std::move(rv.where)),
        warning_(std::move(rv.warning)) {}

  int rank() const override { return opts_.rank; }
  int size() const override { return opts_.world_size; }
  std::string backend() const override { return opts_.backend; }
  std::string wait_mode() const override { return spin().count() > 0 ? "spin" : "block"; }
  std::vector<CollectiveCount> take_counts() override {
    std::lock_guard<std::mutex> lock(count_mu_);
    std::vector<CollectiveCount> out;
    for (const auto& [k, calls] : counts_) {
      out.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), calls});
    }
    counts_.clear();
    return out;
  }
  std::string rendezvous() const override { return where_; }
  std::string rendezvous_warning() const override { return warning_; }
  bool native_reduce_scatter() const override { return opts_.backend == "nccl"; }

  Handle all_reduce(torch::Tensor& t, ReduceOp op) override {
    std::vector<at::Tensor> ts{t};
    c10d::AllreduceOptions o;
    o.reduceOp = to_c10d(op);
    auto h = handle();
    h->what = "all_reduce";
    count("all_reduce", "all_reduce", nbytes(t));
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
    count("broadcast", "broadcast", nbytes(t));
    h->work = call("broadcast", [&] { return pg_->broadcast(ts, o); });
    h->wait();
  }

  Handle all_gather(const torch::Tensor& shard, torch::Tensor& full) override {
    const int64_t n = shard.numel();
    TORCH_CHECK(full.numel() == n * size() && full.is_contiguous() && shard.is_contiguous(),
                "all_gather: full must be contiguous with size() * shard.numel() elements");
    auto h = handle();
    h->what = "all_gather";
    count("all_gather", "all_gather", nbytes(full));
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
    count("reduce_scatter", native_reduce_scatter() ? "reduce_scatter" : "all_reduce", nbytes(full));
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
    count("barrier", "barrier", 0);
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

  // DDP's hooks launch collectives from autograd's threads.
  void count(const char* op, const char* primitive, int64_t bytes) {
    std::lock_guard<std::mutex> lock(count_mu_);
    ++counts_[{op, primitive, bytes}];
  }
  static int64_t nbytes(const torch::Tensor& t) { return t.numel() * int64_t(t.element_size()); }

  std::mutex count_mu_;
  std::map<std::tuple<std::string, std::string, int64_t>, int64_t> counts_;
  std::unique_ptr<NetStoreServer> server_;  // destroyed last
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<compat::CommBackend> pg_;
  CommOptions opts_;
  std::string where_;
  std::string warning_;
  int64_t seq_ = 0;
};

bool in_use(const std::string& msg) {
  return msg.find("in use") != std::string::npos || msg.find("EADDRINUSE") != std::string::npos;
}

// torchrun's agent store: every rank a client, under torch.distributed's prefix.
c10::intrusive_ptr<c10d::Store> open_agent_store(const CommOptions& o, const std::string& where) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(o.master_port);
  so.isServer = false;
  so.numWorkers = c10::nullopt;
  so.waitWorkers = false;
  so.timeout = o.timeout;
  try {
    auto tcp = compat::make_tcp_store(o.master_addr, so);
    return c10::make_intrusive<c10d::PrefixStore>(
        "/worker/attempt_" + std::to_string(o.agent_attempt), tcp);
  } catch (const std::exception& e) {
    throw RunError(where + ": rank " + std::to_string(o.rank) + " could not reach torchrun's store within " +
                   seconds(o.timeout) + ": " + brief(e));
  }
}

bool all_loopback(const std::vector<std::string>& addrs) {
  for (const auto& a : addrs) {
    if (!is_loopback(a)) return false;
  }
  return true;
}

// accel-bench's store: rank 0 hosts it on master_addr, every rank connects.
void open_net_store(const CommOptions& o, const std::string& where, Rendezvous& rv) {
  NetStoreOptions so;
  so.host = o.master_addr;
  so.port = o.master_port;
  so.token = o.store_token;
  so.timeout = o.timeout;
  so.max_connections = std::max(64, 8 * o.world_size);
  if (o.rank == 0) {
    try {
      rv.server = std::make_unique<NetStoreServer>(so);
    } catch (const std::exception& e) {
      const std::string msg = brief(e);
      if (in_use(msg)) {
        throw RunError(where + ": " + msg +
                       " (another run on it? give another MASTER_PORT or runtime.master_port)");
      }
      throw RunError(where + ": cannot host the store: " + msg);
    }
    const auto addrs = rv.server->addresses();
    if (o.num_nodes > 1 && all_loopback(addrs)) {
      throw RunError(where + ": \"" + o.master_addr + "\" is a loopback address on rank 0's machine (" +
                     addrs.front() + "), which the other " + std::to_string(o.num_nodes - 1) +
                     " node(s) cannot reach: set MASTER_ADDR (or runtime.master_addr) to the address "
                     "of rank 0's interface towards them");
    }
  }
  try {
    rv.store = c10::make_intrusive<NetC10dStore>(so);
  } catch (const std::exception& e) {
    throw RunError(where + ": rank " + std::to_string(o.rank) + ": " + brief(e));
  }
  std::string addrs;
  if (rv.server) {
    for (const auto& a : rv.server->addresses()) addrs += (addrs.empty() ? "" : ", ") + a;
  }
  rv.where = "accel-bench's store on " + (addrs.empty() ? o.master_addr : addrs) + ":" +
             std::to_string(o.master_port) +
             (o.store_token.empty() ? " (no authentication: ACCEL_STORE_TOKEN unset)"
                                    : " (authenticated by ACCEL_STORE_TOKEN)");
  if (o.store_token.empty()) {
    rv.warning = "the ranks met in " + rv.where +
                 ": anyone who can reach it during the run can read or write the job's keys; run "
                 "on a trusted network, or give every node the same ACCEL_STORE_TOKEN";
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

// Every rank claims its rank and adds itself; the last to join says so, and
// the others wait for that (one wait, not a poll) until the deadline.
void wait_for_all(c10d::Store& store, const CommOptions& o, const std::string& where,
                  const NetStoreServer* server = nullptr) {
  const auto deadline = Clock::now() + o.timeout;
  int64_t joined = 0;
  try {
    const std::string r = std::to_string(o.rank);
    if (store.add("accel/rank/" + r, 1) > 1) {
      throw RunError(where + ": rank " + r + " is already taken by another process (two processes "
                     "were started with RANK=" + r + "); this one leaves the job");
    }
    joined = store.add("accel/joined", 1);
    if (joined == o.world_size) {
      store.set("accel/all-joined", std::vector<uint8_t>{'1'});
      return;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      store.wait({"accel/all-joined"}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      joined = store.add("accel/joined", 0);
      if (joined >= o.world_size) return;  // the last one joined just now
      // A rank whose secret differs is turned away by rank 0's server: the
      // likeliest reason the rest never came, said here where it is known.
      const int64_t refused = server != nullptr ? server->refused() : 0;
      throw RunError(where + ": only " + std::to_string(joined) + " of " +
                     std::to_string(o.world_size) + " ranks joined within " + seconds(o.timeout) +
                     (refused > 0 ? "; " + std::to_string(refused) +
                                        " connections were refused because their ACCEL_STORE_TOKEN differs "
                                        "from rank 0's: set the same on every node"
                                  : std::string()));
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
  Rendezvous rv;
  if (!o.store_dir.empty()) {
    rv.store = open_file_store(o, where);
    rv.where = "a private folder (" + o.store_dir + ")";
  } else if (o.agent_store) {
    rv.store = open_agent_store(o, where);
    rv.where = "torchrun's store on " + o.master_addr + ":" + std::to_string(o.master_port) +
               " (torchrun's TCPStore, no authentication)";
    rv.warning = "the ranks met in " + rv.where +
                 ": anyone who can reach it during the run can read or write the job's keys; run "
                 "on a trusted network";
  } else {
    open_net_store(o, where, rv);
  }
  wait_for_all(*rv.store, o, where, rv.server.get());
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>("pg", rv.store);
  c10::intrusive_ptr<compat::CommBackend> pg;
  try {
    if (o.backend == "nccl") {
      pg = compat::make_nccl_backend(pg_store, o.rank, o.world_size, o.timeout, o.device);
    } else {
      const auto addr = local_address_towards(o.master_addr, o.master_port);
      pg = compat::make_gloo_backend(pg_store, o.rank, o.world_size, o.timeout, addr);
    }
  } catch (const std::exception& e) {
    throw RunError(where + ": creating the " + o.backend + " process group failed: " + brief(e));
  }
  return std::make_unique<C10dComm>(std::move(rv), pg, o);
}

}  // namespace accel::dist
