#include "kv/radix_cache.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_set>

#include "core/error.h"
#include "kv/slot_allocator.h"

namespace serve8 {

namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

RadixCache::RadixCache(bool disabled) : disabled_(disabled) {
  nodes_.emplace_back();
  nodes_[0].live = true;
}

int32_t RadixCache::new_node() {
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[static_cast<size_t>(id)].live = true;
  return id;
}

void RadixCache::release_node(int32_t id) {
  Node& n = nodes_[static_cast<size_t>(id)];
  uint32_t generation = n.generation + 1;
  n = Node{};  // drops the vectors' memory too; a recycled id starts clean
  n.generation = generation;
  free_ids_.push_back(id);
}

int32_t RadixCache::split(int32_t id, size_t k) {
  int32_t m = new_node();  // may reallocate nodes_: take references only after this
  Node& c = nodes_[static_cast<size_t>(id)];
  Node& head = nodes_[static_cast<size_t>(m)];
  auto kk = static_cast<std::ptrdiff_t>(k);
  head.parent = c.parent;
  head.tokens.assign(c.tokens.begin(), c.tokens.begin() + kk);
  head.slots.assign(c.slots.begin(), c.slots.begin() + kk);
  // Every lock through c also runs through its new head, so the head inherits c's count (and c's
  // sizes stay in the same evictable/protected bucket).
  head.ref = c.ref;
  head.last_access = c.last_access;
  c.tokens.erase(c.tokens.begin(), c.tokens.begin() + kk);
  c.slots.erase(c.slots.begin(), c.slots.begin() + kk);
  c.parent = m;
  head.children.emplace(c.tokens[0], id);
  nodes_[static_cast<size_t>(head.parent)].children[head.tokens[0]] = m;
  return m;
}

RadixCache::MatchResult RadixCache::match_prefix(std::span<const int32_t> tokens, int64_t max_len) {
  stats_.num_queries += 1;
  stats_.tokens_queried += static_cast<int64_t>(tokens.size());
  MatchResult result{{}, root()};
  if (disabled_) return result;

  size_t limit = static_cast<size_t>(std::clamp<int64_t>(max_len, 0, static_cast<int64_t>(tokens.size())));
  std::span<const int32_t> want = tokens.first(limit);
  uint64_t now = ++clock_;
  int32_t cur = 0;
  size_t pos = 0;
  while (pos < want.size()) {
    const auto& children = nodes_[static_cast<size_t>(cur)].children;
    auto it = children.find(want[pos]);
    if (it == children.end()) break;
    int32_t child = it->second;
    size_t k = common_prefix(nodes_[static_cast<size_t>(child)].tokens, want.subspan(pos));
    bool partial = k < nodes_[static_cast<size_t>(child)].tokens.size();
    if (partial) child = split(child, k);
    Node& n = nodes_[static_cast<size_t>(child)];
    n.last_access = now;
    result.slots.insert(result.slots.end(), n.slots.begin(), n.slots.end());
    pos += k;
    cur = child;
    if (partial) break;
  }
  stats_.tokens_matched += static_cast<int64_t>(pos);
  result.node = handle(cur);
  return result;
}

RadixCache::InsertResult RadixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> slots) {
  SERVE8_CHECK(tokens.size() == slots.size(), "RadixCache::insert: {} tokens but {} slots", tokens.size(),
               slots.size());
  InsertResult result{root(), {}};
  if (disabled_) {
    result.duplicates.assign(slots.begin(), slots.end());
    return result;
  }
  for (int32_t s : slots) {
    SERVE8_CHECK(s > kReservedSlot, "RadixCache::insert: slot {} cannot hold a cached token", s);
  }

  uint64_t now = ++clock_;
  int32_t cur = 0;
  size_t pos = 0;
  while (pos < tokens.size()) {
    auto& children = nodes_[static_cast<size_t>(cur)].children;
    auto it = children.find(tokens[pos]);
    if (it == children.end()) {
      // The rest is new: one leaf for all of it.
      int32_t leaf = new_node();
      Node& n = nodes_[static_cast<size_t>(leaf)];
      n.parent = cur;
      n.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(pos), tokens.end());
      n.slots.assign(slots.begin() + static_cast<std::ptrdiff_t>(pos), slots.end());
      n.last_access = now;
      nodes_[static_cast<size_t>(cur)].children.emplace(tokens[pos], leaf);
      evictable_size_ += static_cast<int64_t>(n.tokens.size());
      cur = leaf;
      break;
    }
    int32_t child = it->second;
    size_t k = common_prefix(nodes_[static_cast<size_t>(child)].tokens, tokens.subspan(pos));
    if (k < nodes_[static_cast<size_t>(child)].tokens.size()) child = split(child, k);
    Node& n = nodes_[static_cast<size_t>(child)];
    n.last_access = now;
    // Cached already: the tree keeps its slot. The caller's slot is a duplicate unless it is that
    // very slot (the caller's matched prefix).
    for (size_t j = 0; j < k; ++j) {
      if (slots[pos + j] != n.slots[j]) result.duplicates.push_back(slots[pos + j]);
    }
    pos += k;
    cur = child;
  }
  result.node = handle(cur);
  return result;
}

const RadixCache::Node& RadixCache::checked(NodeHandle node, const char* what) const {
  SERVE8_CHECK(is_valid(node), "RadixCache::{}: stale or invalid node handle (id {}, generation {})", what, node.id,
               node.generation);
  return nodes_[static_cast<size_t>(node.id)];
}

bool RadixCache::is_valid(NodeHandle node) const {
  if (node.id < 0 || static_cast<size_t>(node.id) >= nodes_.size()) return false;
  const Node& n = nodes_[static_cast<size_t>(node.id)];
  return n.live && n.generation == node.generation;
}

void RadixCache::inc_ref(NodeHandle node) {
  checked(node, "inc_ref");
  for (int32_t id = node.id; id != 0;) {
    Node& n = nodes_[static_cast<size_t>(id)];
    if (n.ref == 0) {
      evictable_size_ -= static_cast<int64_t>(n.tokens.size());
      protected_size_ += static_cast<int64_t>(n.tokens.size());
    }
    n.ref += 1;
    id = n.parent;
  }
}

void RadixCache::dec_ref(NodeHandle node) {
  const Node& target = checked(node, "dec_ref");
  // Ancestors count at least as many locks as the node, so checking the node covers the path.
  SERVE8_CHECK(node.id == 0 || target.ref > 0, "RadixCache::dec_ref: node {} is not referenced", node.id);
  for (int32_t id = node.id; id != 0;) {
    Node& n = nodes_[static_cast<size_t>(id)];
    n.ref -= 1;
    if (n.ref == 0) {
      protected_size_ -= static_cast<int64_t>(n.tokens.size());
      evictable_size_ += static_cast<int64_t>(n.tokens.size());
    }
    id = n.parent;
  }
}

std::vector<int32_t> RadixCache::evict(int64_t num_tokens) {
  std::vector<int32_t> out;
  if (disabled_ || num_tokens <= 0) return out;
  auto want = static_cast<size_t>(std::min(num_tokens, evictable_size_));
  out.reserve(want);

  // Oldest first; the id breaks ties so the order does not depend on the heap's internals.
  using Entry = std::pair<uint64_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> leaves;
  for (size_t id = 1; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (n.live && n.ref == 0 && n.children.empty()) leaves.emplace(n.last_access, static_cast<int32_t>(id));
  }
  while (out.size() < want && !leaves.empty()) {
    int32_t id = leaves.top().second;
    leaves.pop();
    Node& n = nodes_[static_cast<size_t>(id)];
    size_t need = want - out.size();
    if (n.slots.size() > need) {
      // Token granularity lets us drop just the tail and keep the rest of the prefix cached.
      out.insert(out.end(), n.slots.end() - static_cast<std::ptrdiff_t>(need), n.slots.end());
      n.slots.resize(n.slots.size() - need);
      n.tokens.resize(n.tokens.size() - need);
      evictable_size_ -= static_cast<int64_t>(need);
      break;
    }
    out.insert(out.end(), n.slots.begin(), n.slots.end());
    evictable_size_ -= static_cast<int64_t>(n.slots.size());
    int32_t parent_id = n.parent;
    Node& parent = nodes_[static_cast<size_t>(parent_id)];
    parent.children.erase(n.tokens[0]);
    release_node(id);
    if (parent_id != 0 && parent.ref == 0 && parent.children.empty()) leaves.emplace(parent.last_access, parent_id);
  }
  return out;
}

std::vector<int32_t> RadixCache::reset() {
  SERVE8_CHECK(protected_size_ == 0, "RadixCache::reset: {} cached tokens are still referenced by requests",
               protected_size_);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(evictable_size_));
  for (size_t id = 1; id < nodes_.size(); ++id) {
    if (nodes_[id].live) {
      out.insert(out.end(), nodes_[id].slots.begin(), nodes_[id].slots.end());
      release_node(static_cast<int32_t>(id));
    }
  }
  nodes_[0].children.clear();
  evictable_size_ = 0;
  return out;
}

std::vector<int32_t> RadixCache::slots(NodeHandle node) const {
  checked(node, "slots");
  std::vector<int32_t> path;
  for (int32_t id = node.id; id != 0; id = nodes_[static_cast<size_t>(id)].parent) path.push_back(id);
  std::vector<int32_t> out;
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const auto& s = nodes_[static_cast<size_t>(*it)].slots;
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

int64_t RadixCache::prefix_length(NodeHandle node) const {
  checked(node, "prefix_length");
  int64_t len = 0;
  for (int32_t id = node.id; id != 0; id = nodes_[static_cast<size_t>(id)].parent) {
    len += static_cast<int64_t>(nodes_[static_cast<size_t>(id)].tokens.size());
  }
  return len;
}

int32_t RadixCache::ref_count(NodeHandle node) const { return checked(node, "ref_count").ref; }

int64_t RadixCache::num_nodes() const { return static_cast<int64_t>(nodes_.size() - free_ids_.size()) - 1; }

void RadixCache::validate() const {
  int64_t evictable = 0, protected_ = 0, live = 0, reached = 0;
  std::unordered_set<int32_t> seen_slots;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.live) continue;
    ++live;
    SERVE8_CHECK(n.tokens.size() == n.slots.size(), "RadixCache: node {} has {} tokens, {} slots", id, n.tokens.size(),
                 n.slots.size());
    int32_t child_refs = 0;
    for (auto [first, child] : n.children) {
      SERVE8_CHECK(child > 0 && static_cast<size_t>(child) < nodes_.size() && nodes_[size_t(child)].live,
                   "RadixCache: node {} links to a dead child {}", id, child);
      const Node& c = nodes_[static_cast<size_t>(child)];
      SERVE8_CHECK(c.parent == static_cast<int32_t>(id) && !c.tokens.empty() && c.tokens[0] == first,
                   "RadixCache: child {} of node {} is linked inconsistently", child, id);
      child_refs += c.ref;
      ++reached;
    }
    if (id == 0) continue;
    SERVE8_CHECK(!n.tokens.empty(), "RadixCache: node {} is empty", id);
    SERVE8_CHECK(n.ref >= 0 && n.ref >= child_refs, "RadixCache: node {} has ref {} below its children's {}", id, n.ref,
                 child_refs);
    (n.ref > 0 ? protected_ : evictable) += static_cast<int64_t>(n.tokens.size());
    for (int32_t s : n.slots) {
      SERVE8_CHECK(s > kReservedSlot, "RadixCache: node {} holds slot {}", id, s);
      SERVE8_CHECK(seen_slots.insert(s).second, "RadixCache: slot {} is cached twice", s);
    }
  }
  SERVE8_CHECK(reached == live - 1, "RadixCache: {} live nodes but {} linked from a parent", live - 1, reached);
  SERVE8_CHECK(evictable == evictable_size_ && protected_ == protected_size_,
               "RadixCache: sizes {}/{} (evictable/protected) but counted {}/{}", evictable_size_, protected_size_,
               evictable, protected_);
}

}  // namespace serve8
