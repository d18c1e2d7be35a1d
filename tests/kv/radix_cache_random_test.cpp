// Randomized test of SlotAllocator + RadixCache driven the way the engine drives them, checked
// against a brute-force model: a map from every cached token prefix to its slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "kv/radix_cache.h"
#include "kv/slot_allocator.h"

namespace serve8 {
namespace {

using Tokens = std::vector<int32_t>;
using Slots = std::vector<int32_t>;

struct Request {
  Tokens tokens;
  Slots slots;  // slots[i] holds tokens[i]; the first locked_len belong to the tree
  RadixCache::NodeHandle node;
  size_t locked_len = 0;
};

class Harness {
 public:
  Harness(uint32_t seed, bool disabled) : rng_(seed), cache_(disabled), alloc_(kNumSlots) {}

  void run(int steps) {
    for (int i = 0; i < steps; ++i) {
      int op = pick(0, 9);
      if (op <= 2 && running_.size() < kMaxRunning) {
        admit();
      } else if (op <= 4 && !running_.empty()) {
        decode(pick_request());
      } else if (op == 5 && !running_.empty()) {
        finish(pick_request());
      } else if (op == 6 && !running_.empty()) {
        retract_dropping(pick_request());
      } else if (op == 7 && !running_.empty() && !cache_.disabled()) {
        cache_unfinished(pick_request());
      } else if (op == 8) {
        evict(pick(0, 12));
      } else {
        probe();
      }
      check_invariants();
      if (::testing::Test::HasFailure()) return;
    }
    while (!running_.empty()) finish(0);
    check_invariants();
    // The run must have reached the interesting cases, or passing it proves little.
    EXPECT_GT(num_refused_, 0);
    if (!cache_.disabled()) {
      EXPECT_GT(num_evicted_, 0);
      EXPECT_GT(num_duplicates_, 0);
      EXPECT_GT(cache_.stats().tokens_matched, 0);
    }
    alloc_.free(cache_.reset());
    EXPECT_EQ(alloc_.num_slots_used(), 0);
  }

 private:
  static constexpr int64_t kNumSlots = 64;
  static constexpr size_t kMaxRunning = 6;
  static constexpr int kAlphabet = 3;

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  size_t pick_request() { return static_cast<size_t>(pick(0, static_cast<int>(running_.size()) - 1)); }
  static Tokens prefix(const Tokens& t, size_t n) {
    return Tokens(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n));
  }

  // The model's answer: the longest cached prefix no longer than limit (the cache is prefix-closed).
  Slots expected_match(const Tokens& t, size_t limit) const {
    Slots out;
    for (size_t n = 1; n <= limit; ++n) {
      auto it = cached_.find(prefix(t, n));
      if (it == cached_.end()) break;
      out.push_back(it->second);
    }
    return out;
  }

  RadixCache::MatchResult match(const Tokens& t, size_t limit) {
    auto m = cache_.match_prefix(t, static_cast<int64_t>(limit));
    EXPECT_EQ(m.slots, expected_match(t, limit));
    EXPECT_EQ(cache_.prefix_length(m.node), static_cast<int64_t>(m.slots.size()));
    // What a matched slot holds is the K/V of exactly this prefix.
    for (size_t i = 0; i < m.slots.size(); ++i) EXPECT_EQ(content_.at(m.slots[i]), prefix(t, i + 1));
    return m;
  }

  bool is_locked(const Tokens& p) const {
    auto holds = [&](const Request& r) {
      return r.locked_len >= p.size() && std::equal(p.begin(), p.end(), r.tokens.begin());
    };
    return std::any_of(running_.begin(), running_.end(), holds) || (admitting_ && holds(*admitting_));
  }

  // Engine-style: evict what is missing, then check whether n slots can be had.
  bool make_room(int64_t n) {
    if (!alloc_.can_allocate(n)) evict(n - alloc_.num_slots_free());
    return alloc_.can_allocate(n);
  }

  void evict(int64_t n) {
    int64_t evictable = cache_.evictable_size();
    Slots out = cache_.evict(n);
    num_evicted_ += static_cast<int64_t>(out.size());
    EXPECT_EQ(static_cast<int64_t>(out.size()), std::min(std::max<int64_t>(n, 0), evictable));
    for (int32_t s : out) {
      const Tokens& p = content_.at(s);
      auto it = cached_.find(p);
      ASSERT_TRUE(it != cached_.end() && it->second == s) << "evicted slot " << s << " was not in the tree";
      EXPECT_FALSE(is_locked(p)) << "evicted slot " << s << " of a locked prefix";
      cached_.erase(it);
    }
    // Only leaves go, so what stays is still prefix-closed.
    for (const auto& [p, s] : cached_) {
      if (p.size() > 1) {
        EXPECT_TRUE(cached_.count(prefix(p, p.size() - 1))) << "orphaned slot " << s;
      }
    }
    alloc_.free(out);
  }

  void compute(Request& r, size_t from) {
    for (size_t i = from; i < r.tokens.size(); ++i) content_[r.slots[i]] = prefix(r.tokens, i + 1);
  }

  void admit() {
    Request r;
    int len = pick(1, 16);
    for (int i = 0; i < len; ++i) r.tokens.push_back(pick(0, kAlphabet - 1));
    auto m = match(r.tokens, r.tokens.size() - 1);
    cache_.inc_ref(m.node);
    r.node = m.node;
    r.locked_len = m.slots.size();
    int64_t need = static_cast<int64_t>(r.tokens.size() - m.slots.size());
    admitting_ = &r;  // its prefix is locked while make_room evicts
    bool room = make_room(need);
    admitting_ = nullptr;
    if (!room) {
      num_refused_ += 1;
      cache_.dec_ref(m.node);
      return;
    }
    r.slots = m.slots;
    Slots fresh = alloc_.allocate(need);
    r.slots.insert(r.slots.end(), fresh.begin(), fresh.end());
    compute(r, m.slots.size());
    running_.push_back(std::move(r));
  }

  void decode(size_t i) {
    if (running_[i].tokens.size() >= 24 || !make_room(1)) {
      finish(i);  // retraction (or a length stop): cache what was computed
      return;
    }
    Request& r = running_[i];
    r.tokens.push_back(pick(0, kAlphabet - 1));
    r.slots.push_back(alloc_.allocate(1)[0]);
    compute(r, r.tokens.size() - 1);
  }

  // insert() against the model: returns the expected duplicates and updates the model.
  Slots model_insert(const Request& r) {
    Slots dups;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      if (cache_.disabled()) {
        dups.push_back(r.slots[i]);
        continue;
      }
      auto [it, added] = cached_.emplace(prefix(r.tokens, i + 1), r.slots[i]);
      if (!added && it->second != r.slots[i]) dups.push_back(r.slots[i]);
    }
    num_duplicates_ += static_cast<int64_t>(dups.size());
    return dups;
  }

  void finish(size_t i) {
    Request r = std::move(running_[i]);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    auto res = cache_.insert(r.tokens, r.slots);
    EXPECT_EQ(res.duplicates, model_insert(r));
    alloc_.free(res.duplicates);
    cache_.dec_ref(r.node);
  }

  void retract_dropping(size_t i) {
    Request r = std::move(running_[i]);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    alloc_.free(std::span(r.slots).subspan(r.locked_len));
    cache_.dec_ref(r.node);
  }

  void cache_unfinished(size_t i) {
    Request& r = running_[i];
    auto res = cache_.insert(r.tokens, r.slots);
    EXPECT_EQ(res.duplicates, model_insert(r));
    alloc_.free(res.duplicates);
    r.slots = cache_.slots(res.node);
    ASSERT_EQ(r.slots, expected_match(r.tokens, r.tokens.size()));
    cache_.inc_ref(res.node);
    cache_.dec_ref(r.node);
    r.node = res.node;
    r.locked_len = r.tokens.size();
  }

  void probe() {
    Tokens t;
    int len = pick(0, 12);
    for (int i = 0; i < len; ++i) t.push_back(pick(0, kAlphabet - 1));
    match(t, static_cast<size_t>(pick(0, len)));
  }

  void check_invariants() {
    ASSERT_NO_THROW(cache_.validate());
    std::map<int32_t, int> where;  // slot -> how many owners claim it
    std::set<Tokens> locked;
    for (const auto& [p, s] : cached_) where[s] += 1;
    for (const auto& r : running_) {
      for (size_t i = 0; i < r.locked_len; ++i) {
        locked.insert(prefix(r.tokens, i + 1));
        auto it = cached_.find(prefix(r.tokens, i + 1));
        ASSERT_TRUE(it != cached_.end() && it->second == r.slots[i]) << "a locked prefix slot left the tree";
      }
      for (size_t i = r.locked_len; i < r.slots.size(); ++i) where[r.slots[i]] += 1;
    }
    for (int32_t s = 1; s < kNumSlots; ++s) {
      int owners = where.count(s) ? where[s] : 0;
      if (!alloc_.is_allocated(s)) owners += 1;
      ASSERT_EQ(owners, 1) << "slot " << s << " is free/cached/held " << owners << " times";
    }
    EXPECT_EQ(cache_.total_size(), static_cast<int64_t>(cached_.size()));
    EXPECT_EQ(cache_.protected_size(), static_cast<int64_t>(locked.size()));
    EXPECT_EQ(cache_.evictable_size(), cache_.total_size() - cache_.protected_size());
  }

  std::mt19937 rng_;
  RadixCache cache_;
  SlotAllocator alloc_;
  std::vector<Request> running_;
  const Request* admitting_ = nullptr;
  int64_t num_evicted_ = 0, num_duplicates_ = 0, num_refused_ = 0;
  std::map<Tokens, int32_t> cached_;   // the model of the tree: every cached prefix -> its slot
  std::map<int32_t, Tokens> content_;  // slot -> the prefix whose last token's K/V it holds
};

class RadixCacheRandom : public ::testing::TestWithParam<std::tuple<uint32_t, bool>> {};

TEST_P(RadixCacheRandom, MatchesBruteForceModel) {
  auto [seed, disabled] = GetParam();
  Harness h(seed, disabled);
  h.run(4000);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RadixCacheRandom,
                         ::testing::Combine(::testing::Values(1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u), ::testing::Bool()));

}  // namespace
}  // namespace serve8
