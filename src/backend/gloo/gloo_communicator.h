// Tensor parallelism across processes (--nnodes) on the CPU backend: one Gloo context per rank
// over TCP, which meet through a key-value store that rank 0's process serves at --dist-init-addr.
//
// Every rank of such a group, in any process, gets its steps from rank 0 by broadcast(); the sums
// are gathered and added in rank order, so each rank holds the bits the in-process group would.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/communicator.h"

namespace serve8 {

struct GlooGroupOptions {
  std::string host;  // of --dist-init-addr: where rank 0's process serves the store
  int port = 0;
  int size = 0;                                                 // ranks in the group (--tp-size)
  std::vector<int> ranks;                                       // this process's ranks
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // a collective waiting this long fails
};

class GlooStoreServer;

// The communicators of this process's ranks, connected to every other rank of the group; the
// process holding rank 0 serves the store, which lives as long as the returned group.
class GlooGroup {
 public:
  explicit GlooGroup(const GlooGroupOptions& options);
  ~GlooGroup();
  GlooGroup(const GlooGroup&) = delete;
  GlooGroup& operator=(const GlooGroup&) = delete;

  // In options.ranks' order; each is used by one thread at a time.
  std::vector<std::unique_ptr<Communicator>> take_communicators();

 private:
  std::unique_ptr<GlooStoreServer> server_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// "HOST:PORT" (--dist-init-addr) split; throws serve8::Error naming the flag when malformed.
std::pair<std::string, int> parse_dist_init_addr(const std::string& addr);

}  // namespace serve8
