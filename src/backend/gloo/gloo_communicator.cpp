#include "backend/gloo/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

// After <utility>: Boost 1.74's Asio uses std::exchange without including it.
#include <boost/asio.hpp>

#include "core/error.h"
#include "core/log.h"

namespace serve8 {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// The store's wire format: a request is an op byte, then length-prefixed strings; 'S' key value
// sets, 'G' key answers the value once the key exists (or an empty reply after the timeout).
void write_string(tcp::socket& s, const std::string& v) {
  const uint32_t n = static_cast<uint32_t>(v.size());
  asio::write(s, asio::buffer(&n, sizeof n));
  if (n) asio::write(s, asio::buffer(v.data(), n));
}

std::string read_string(tcp::socket& s) {
  uint32_t n = 0;
  asio::read(s, asio::buffer(&n, sizeof n));
  std::string v(n, '\0');
  if (n) asio::read(s, asio::buffer(v.data(), n));
  return v;
}

}  // namespace

// The rendezvous store, served by rank 0's process: a map behind a mutex, a thread per client.
class GlooStoreServer {
 public:
  GlooStoreServer(const std::string& host, int port, std::chrono::milliseconds timeout)
      : acceptor_(io_), timeout_(timeout) {
    const tcp::endpoint ep(asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host),
                           static_cast<unsigned short>(port));
    acceptor_.open(ep.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    boost::system::error_code ec;
    acceptor_.bind(ep, ec);
    SERVE8_CHECK(!ec, "--dist-init-addr {}:{}: cannot listen there: {}", host, port, ec.message());
    acceptor_.listen();
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~GlooStoreServer() {
    boost::system::error_code ec;
    const tcp::endpoint ep = acceptor_.local_endpoint(ec);
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
      // Shutting a socket down wakes a thread blocked reading it (closing it does not).
      for (auto& s : sockets_) s->shutdown(tcp::socket::shutdown_both, ec);
    }
    cv_.notify_all();
    {
      tcp::socket wake(io_);  // accept() returns, sees stopping_ and ends
      wake.connect(
          tcp::endpoint(ep.address().is_unspecified() ? asio::ip::make_address("127.0.0.1") : ep.address(), ep.port()),
          ec);
    }
    if (thread_.joinable()) thread_.join();
    for (std::thread& t : clients_) t.join();
  }

 private:
  void accept_loop() {
    for (;;) {
      auto sock = std::make_shared<tcp::socket>(io_);
      boost::system::error_code ec;
      acceptor_.accept(*sock, ec);
      if (ec) return;
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_) return;
      sockets_.push_back(sock);
      clients_.emplace_back([this, sock] { serve(*sock); });
    }
  }
  void serve(tcp::socket& s) {
    try {
      for (;;) {
        char op = 0;
        asio::read(s, asio::buffer(&op, 1));
        const std::string key = read_string(s);
        if (op == 'S') {
          std::string value = read_string(s);
          {
            std::lock_guard<std::mutex> lk(mu_);
            map_[key] = std::move(value);
          }
          cv_.notify_all();
          continue;
        }
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait_for(lk, timeout_, [&] { return stopping_ || map_.count(key) > 0; });
        const char found = map_.count(key) > 0;
        const std::string value = found ? map_[key] : std::string();
        lk.unlock();
        asio::write(s, asio::buffer(&found, 1));
        write_string(s, value);
      }
    } catch (const std::exception&) {  // the client went away
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> map_;
  bool stopping_ = false;
  std::thread thread_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> clients_;
};

namespace {

// A client of GlooStoreServer, as Gloo's rendezvous wants one.
class TcpStore : public gloo::rendezvous::Store {
 public:
  TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout) : socket_(io_), timeout_(timeout) {
    // Rank 0's process may still be starting: retry until the timeout.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      boost::system::error_code ec;
      tcp::resolver resolver(io_);
      const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
      if (!ec) asio::connect(socket_, endpoints, ec);
      if (!ec) break;
      SERVE8_CHECK(std::chrono::steady_clock::now() < deadline,
                   "--dist-init-addr {}:{}: no rank 0 answered within {} s ({})", host, port,
                   std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), ec.message());
      socket_.close(ec);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard<std::mutex> lk(mu_);
    const char op = 'S';
    asio::write(socket_, asio::buffer(&op, 1));
    write_string(socket_, key);
    write_string(socket_, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::lock_guard<std::mutex> lk(mu_);
    const char op = 'G';
    asio::write(socket_, asio::buffer(&op, 1));
    write_string(socket_, key);
    char found = 0;
    asio::read(socket_, asio::buffer(&found, 1));
    const std::string v = read_string(socket_);
    SERVE8_CHECK(found, "tensor parallel: rendezvous key {} did not appear within {} s: is every --node-rank up?", key,
                 std::chrono::duration_cast<std::chrono::seconds>(timeout_).count());
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const std::string& k : keys) get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override { wait(keys); }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
};

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<gloo::Context> ctx) : ctx_(std::move(ctx)) {}
  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }

  void all_reduce_sum(Tensor x) override {
    SERVE8_CHECK(x.dtype == DType::kF32, "all_reduce_sum: x must be fp32, got {} {}", dtype_name(x.dtype),
                 x.shape_str());
    check_open();
    const size_t n = static_cast<size_t>(x.numel());
    gathered_.resize(n * static_cast<size_t>(size()));
    float* data = x.ptr<float>();
    guard([&] {
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput(data, n);
      opts.setOutput(gathered_.data(), gathered_.size());
      gloo::allgather(opts);
    });
    // In rank order, as the in-process group adds.
    std::memcpy(data, gathered_.data(), n * sizeof(float));
    for (int r = 1; r < size(); ++r) {
      const float* part = gathered_.data() + n * static_cast<size_t>(r);
      for (size_t i = 0; i < n; ++i) data[i] += part[i];
    }
  }

  void all_gather(const Tensor& in, Tensor out) override {
    SERVE8_CHECK(in.ndim == 2 && out.ndim == 2 && in.dim(0) == out.dim(0) && in.dtype == out.dtype,
                 "all_gather: in {} and out {} must be [R, C_r] and [R, C] of one dtype", in.shape_str(),
                 out.shape_str());
    check_open();
    const int64_t rows = in.dim(0), es = static_cast<int64_t>(dtype_size(in.dtype));
    // Each rank's column count first, then its rows as bytes.
    std::vector<int64_t> cols(static_cast<size_t>(size()));
    int64_t mine = in.dim(1);
    guard([&] {
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput(&mine, 1);
      opts.setOutput(cols.data(), cols.size());
      gloo::allgather(opts);
    });
    int64_t total = 0;
    std::vector<size_t> counts;
    for (int64_t c : cols) {
      counts.push_back(static_cast<size_t>(rows * c * es));
      total += c;
    }
    SERVE8_CHECK(total == out.dim(1), "all_gather: the ranks' {} columns do not fill out {}", total, out.shape_str());
    staged_.resize(static_cast<size_t>(rows * total * es));
    guard([&] {
      gloo::AllgathervOptions opts(ctx_);
      opts.setInput(static_cast<char*>(in.data), static_cast<size_t>(rows * mine * es));
      opts.setOutput(staged_.data(), counts);
      gloo::allgatherv(opts);
    });
    char* o = static_cast<char*>(out.data);
    size_t at = 0;
    int64_t col0 = 0;
    for (size_t r = 0; r < cols.size(); ++r) {
      const int64_t c = cols[r];
      for (int64_t row = 0; row < rows; ++row)
        std::memcpy(o + (row * total + col0) * es, staged_.data() + at + static_cast<size_t>(row * c * es),
                    static_cast<size_t>(c * es));
      at += counts[r];
      col0 += c;
    }
  }

  void broadcast(std::vector<int32_t>& data) override {
    check_open();
    int64_t n = static_cast<int64_t>(data.size());
    guard([&] {
      gloo::BroadcastOptions opts(ctx_);
      opts.setRoot(0);
      if (rank() == 0) opts.setInput(&n, 1);
      opts.setOutput(&n, 1);
      gloo::broadcast(opts);
    });
    data.resize(static_cast<size_t>(n));
    if (n == 0) return;
    guard([&] {
      gloo::BroadcastOptions opts(ctx_);
      opts.setRoot(0);
      if (rank() == 0) opts.setInput(data.data(), data.size());
      opts.setOutput(data.data(), data.size());
      gloo::broadcast(opts);
    });
  }

  // Gloo cannot interrupt a peer's collective: a broken group stays broken here, and the peers
  // fail when their collective times out or this process's sockets close.
  void abort() override { broken_ = true; }

 private:
  void check_open() const {
    SERVE8_CHECK(!broken_, "tensor parallel: rank {} stopped: another rank of the group failed", ctx_->rank);
  }
  template <typename F>
  void guard(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      broken_ = true;
      throw Error(fmt::format("tensor parallel: rank {} of {}: a collective failed ({}); the group is broken",
                              ctx_->rank, ctx_->size, e.what()));
    }
  }

  std::shared_ptr<gloo::Context> ctx_;
  std::vector<float> gathered_;
  std::vector<char> staged_;
  bool broken_ = false;
};

// The address this process's ranks listen on: loopback when rank 0 is on it, else this host's name.
std::string local_address(const std::string& init_host) {
  if (init_host == "127.0.0.1" || init_host == "localhost" || init_host == "::1") return "127.0.0.1";
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "0.0.0.0";
  return name;
}

}  // namespace

std::pair<std::string, int> parse_dist_init_addr(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  int port = 0;
  if (colon != std::string::npos && colon > 0) {
    try {
      size_t used = 0;
      port = std::stoi(addr.substr(colon + 1), &used);
      if (used != addr.size() - colon - 1) port = 0;
    } catch (const std::exception&) {
      port = 0;
    }
  }
  SERVE8_CHECK(port > 0 && port < 65536, "--dist-init-addr '{}' must be HOST:PORT (e.g. 10.0.0.1:5000)", addr);
  return {addr.substr(0, colon), port};
}

GlooGroup::GlooGroup(const GlooGroupOptions& o) {
  SERVE8_CHECK(o.size >= 1 && !o.ranks.empty(), "tensor parallel: a group of {} ranks with {} local", o.size,
               o.ranks.size());
  const bool has_rank0 = std::find(o.ranks.begin(), o.ranks.end(), 0) != o.ranks.end();
  if (has_rank0) server_ = std::make_unique<GlooStoreServer>(o.host, o.port, o.timeout);
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(local_address(o.host).c_str());
  // One context per local rank, connected in parallel: each waits for every other rank's address.
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(o.ranks.size());
  std::vector<std::exception_ptr> errors(o.ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < o.ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        // The store is needed only to meet: once connected, the ranks talk over their own pairs.
        TcpStore store(o.host, o.port, o.timeout);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(o.ranks[i], o.size);
        ctx->setTimeout(o.timeout);
        gloo::rendezvous::PrefixStore prefixed("serve8-tp", store);
        ctx->connectFullMesh(prefixed, device);
        contexts[i] = std::move(ctx);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  for (const auto& ctx : contexts) comms_.push_back(std::make_unique<GlooCommunicator>(ctx));
  spdlog::info("tensor parallel: ranks {} of {} connected through {}:{}", fmt::join(o.ranks, ","), o.size, o.host,
               o.port);
}

GlooGroup::~GlooGroup() = default;

std::vector<std::unique_ptr<Communicator>> GlooGroup::take_communicators() { return std::move(comms_); }

}  // namespace serve8
