// RadixCache: a prefix tree over token ids whose nodes point at the KV slots holding those
// tokens' K/V, so a request that shares a prefix with an earlier one skips prefill for it
// (DESIGN.md "KV cache"; the design follows SGLang's RadixCache with page size 1).
//
// Each node holds a run of (token id, slot) pairs; edges are compressed and split when a match or
// an insert ends inside a run. A node's slot at position i holds the K/V of the token there given
// every token on the path before it. Requests that use a cached prefix lock it (inc_ref on the node
// where their prefix ends, which counts along the path to the root); unlocked leaves are evicted
// least recently used first. Time is a counter bumped by each match and insert, not a clock, so
// eviction order is deterministic.
//
// How the engine (scheduler thread only; no locks) drives SlotAllocator A and RadixCache C over
// one request's life, for prompt p, keeping the request's slots R in position order:
//
//   admit:   m = C.match_prefix(p, p.size() - 1)     // leave >= 1 token to compute logits from
//            C.inc_ref(m.node)                       // before any evict, or the prefix may go
//            need = p.size() - m.slots.size()
//            if (!A.can_allocate(need)) A.free(C.evict(need - A.num_slots_free()))
//            if (!A.can_allocate(need)) { C.dec_ref(m.node); stay queued }
//            R = m.slots + A.allocate(need)
//            prefill computes tokens [m.slots.size(), p.size()) into the new slots
//   decode:  one slot per step from A (evicting as above), appended to R
//   finish:  tokens = the first R.size() tokens of prompt + output (the last sampled token has no
//            K/V yet)
//            r = C.insert(tokens, R)                 // the tree now owns R's slots ...
//            A.free(r.duplicates)                    // ... except those it already had cached
//            A.free(slots of R past the computed tokens, if a step was cut short)
//            C.dec_ref(m.node)
//   retract: (out of slots mid-decode) as finish; the request re-queues and its next match will
//            likely find what it computed. Or, to drop the work instead:
//            A.free(R.subspan(m.slots.size())); C.dec_ref(m.node)
//   chunked prefill, between chunks (optional, lets other requests share a long prompt early):
//            r = C.insert(tokens so far, R); A.free(r.duplicates)
//            R = C.slots(r.node) + the rest of R     // duplicates were replaced
//            C.inc_ref(r.node); C.dec_ref(m.node); m.node = r.node
//
// Every slot is always in exactly one place: A's free list, the tree, or a request's slots beyond
// its locked prefix. Disabled mode (--disable-radix-cache) keeps the same code path: match finds
// nothing, insert takes nothing and returns every slot as a duplicate, evict returns nothing. Only
// the chunked-prefill step must be skipped when disabled(), since the tree cannot take the slots.
//
// Handles: a NodeHandle stays valid while the node is referenced. An unreferenced node may be
// evicted (or trimmed) by the next evict/reset, so take the reference right after match/insert.
// Stale handles are detected (generation count) and rejected with serve8::Error.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace serve8 {

class RadixCache {
 public:
  struct NodeHandle {
    int32_t id = 0;  // 0 is the root: the empty prefix
    uint32_t generation = 0;
    bool operator==(const NodeHandle&) const = default;
  };
  struct MatchResult {
    std::vector<int32_t> slots;  // slots of tokens[0, slots.size()), the longest cached prefix
    NodeHandle node;             // the node whose path is exactly that prefix
  };
  struct InsertResult {
    NodeHandle node;  // the node whose path is exactly the inserted tokens
    // The caller's slots at positions the tree had already cached under other slots, in position
    // order: the caller must free them. The caller's slots that the tree already held (its matched
    // prefix) are not duplicates.
    std::vector<int32_t> duplicates;
  };
  struct Stats {
    int64_t num_queries = 0;
    int64_t tokens_queried = 0;
    int64_t tokens_matched = 0;
    double hit_rate() const { return tokens_queried ? double(tokens_matched) / double(tokens_queried) : 0.0; }
  };

  explicit RadixCache(bool disabled = false);

  // The longest cached prefix of tokens, at most max_len long. Splits a node when the match ends
  // inside it, so the returned node ends exactly at the prefix. Marks the path as used now.
  MatchResult match_prefix(std::span<const int32_t> tokens, int64_t max_len);
  MatchResult match_prefix(std::span<const int32_t> tokens) {
    return match_prefix(tokens, static_cast<int64_t>(tokens.size()));
  }
  // Caches tokens[i] -> slots[i] for every position the tree does not have yet.
  InsertResult insert(std::span<const int32_t> tokens, std::span<const int32_t> slots);

  // Lock / unlock the path from the root to node against eviction. The root is a no-op.
  void inc_ref(NodeHandle node);
  void dec_ref(NodeHandle node);

  // Removes min(num_tokens, evictable_size()) tokens from unreferenced leaves, least recently used
  // first (a leaf's tail is trimmed when it holds more than is still needed), and returns their
  // slots for the caller to give back to the SlotAllocator. Scans the tree for leaves, so call it
  // once with the whole shortfall rather than token by token.
  std::vector<int32_t> evict(int64_t num_tokens);
  // Empties the tree (flush_cache) and returns all its slots. Throws if anything is referenced.
  std::vector<int32_t> reset();

  NodeHandle root() const { return NodeHandle{0, nodes_[0].generation}; }
  bool is_valid(NodeHandle node) const;
  // The tree's slots of the whole prefix ending at node, in position order.
  std::vector<int32_t> slots(NodeHandle node) const;
  int64_t prefix_length(NodeHandle node) const;
  int32_t ref_count(NodeHandle node) const;

  int64_t evictable_size() const { return evictable_size_; }  // tokens in unreferenced nodes
  int64_t protected_size() const { return protected_size_; }  // tokens in referenced nodes
  int64_t total_size() const { return evictable_size_ + protected_size_; }
  int64_t num_nodes() const;  // not counting the root
  bool disabled() const { return disabled_; }
  const Stats& stats() const { return stats_; }
  void reset_stats() { stats_ = Stats{}; }

  // Checks the tree's internal invariants (sizes, links, reference counts, slot uniqueness);
  // throws serve8::Error on the first violation. O(tree size): for tests and debug builds.
  void validate() const;

 private:
  struct Node {
    int32_t parent = -1;
    std::vector<int32_t> tokens;                    // the edge label; never empty except at the root
    std::vector<int32_t> slots;                     // slots[i] holds tokens[i]
    std::unordered_map<int32_t, int32_t> children;  // first token of the child's run -> node id
    int32_t ref = 0;
    uint64_t last_access = 0;
    uint32_t generation = 0;  // bumped when the id is recycled, so stale handles are caught
    bool live = false;
  };

  int32_t new_node();
  void release_node(int32_t id);
  // Splits node id after its first k tokens; returns the new node holding that first part, which
  // takes id's place under the parent. id keeps the rest, so handles to id stay meaningful.
  int32_t split(int32_t id, size_t k);
  NodeHandle handle(int32_t id) const { return NodeHandle{id, nodes_[static_cast<size_t>(id)].generation}; }
  const Node& checked(NodeHandle node, const char* what) const;

  bool disabled_;
  std::vector<Node> nodes_;  // by id; nodes_[0] is the root
  std::vector<int32_t> free_ids_;
  uint64_t clock_ = 0;
  int64_t evictable_size_ = 0;
  int64_t protected_size_ = 0;
  Stats stats_;
};

}  // namespace serve8
