#include "tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <queue>

#include "core/error.h"

namespace serve8 {
namespace {

// Length of the UTF-8 character starting with `lead`; 1 for a stray byte, so a walk always moves.
std::size_t char_length(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

// A symbol of the word being merged: a vocabulary id and its neighbours. A symbol merged into its
// left neighbour is dead (len 0) and stays in place, so positions stay valid as heap keys.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;
};

struct Candidate {
  int32_t rank;
  int32_t pos;  // the left symbol
  int32_t result;
  // priority_queue puts the largest first; the best merge is the lowest rank, then leftmost.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

BpeModel::BpeModel(TokenIds vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& source)
    : vocab_(std::move(vocab)), options_(options) {
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab_) {
    SERVE8_CHECK(id >= 0, "{}: vocabulary entry '{}' has the negative id {}", source, token, id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<std::size_t>(max_id + 1));
  assigned_.assign(id_to_token_.size(), false);
  for (const auto& [token, id] : vocab_) {
    SERVE8_CHECK(!assigned_[id], "{}: id {} is given to both '{}' and '{}'", source, id, id_to_token_[id], token);
    id_to_token_[id] = token;
    assigned_[id] = true;
  }
  add_merges(merges, source);
}

BpeModel::BpeModel(std::vector<std::string> tokens, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& source)
    : id_to_token_(std::move(tokens)), assigned_(id_to_token_.size(), true), options_(options) {
  vocab_.reserve(id_to_token_.size());
  for (std::size_t id = 0; id < id_to_token_.size(); ++id) vocab_.emplace(id_to_token_[id], static_cast<int32_t>(id));
  add_merges(merges, source);
}

void BpeModel::add_merges(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& source) {
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const int32_t left_id = token_to_id(left);
    const int32_t right_id = token_to_id(right);
    SERVE8_CHECK(left_id >= 0 && right_id >= 0, "{}: merge {} ('{} {}') names '{}', which is not in the vocabulary",
                 source, rank, left, right, left_id < 0 ? left : right);
    std::string merged = left;
    merged += right;
    const int32_t result = token_to_id(merged);
    SERVE8_CHECK(result >= 0, "{}: merge {} ('{} {}') makes '{}', which is not in the vocabulary", source, rank, left,
                 right, merged);
    // A pair listed twice keeps its first (best) rank.
    merges_.try_emplace(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), result});
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = token_to_id(fmt::format("<0x{:02X}>", b));
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= num_ids() || !assigned_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::push_unknown(std::string_view ch, std::vector<int32_t>& symbols) const {
  if (options_.byte_fallback) {
    bool all_bytes = true;
    for (char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
    if (all_bytes) {
      for (char c : ch) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      return;
    }
  }
  if (options_.unk_id < 0) return;
  if (options_.fuse_unk && !symbols.empty() && symbols.back() == options_.unk_id) return;
  symbols.push_back(options_.unk_id);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const int32_t id = token_to_id(word); id >= 0) {
      ids.push_back(id);
      return;
    }
  }

  // Each character starts as one symbol.
  std::vector<int32_t> start_ids;
  start_ids.reserve(word.size());
  for (std::size_t pos = 0; pos < word.size();) {
    const std::size_t len = std::min(char_length(static_cast<unsigned char>(word[pos])), word.size() - pos);
    const std::string_view ch = word.substr(pos, len);
    if (const int32_t id = token_to_id(ch); id >= 0) {
      start_ids.push_back(id);
    } else {
      push_unknown(ch, start_ids);
    }
    pos += len;
  }
  const auto n = static_cast<int32_t>(start_ids.size());
  if (n <= 1) {
    ids.insert(ids.end(), start_ids.begin(), start_ids.end());
    return;
  }

  std::vector<Symbol> symbols(static_cast<std::size_t>(n));
  for (int32_t i = 0; i < n; ++i) symbols[i] = {start_ids[i], i - 1, i + 1 < n ? i + 1 : -1, 1};

  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || symbols[pos].next < 0) return;
    const auto it = merges_.find(pair_key(symbols[pos].id, symbols[symbols[pos].next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    // A candidate is stale once either side has merged since it was queued; the pair it was made
    // for then spans other text, so it maps to another result (or to none).
    const auto it = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.result != top.result) continue;
    Symbol& right = symbols[left.next];
    left.id = top.result;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace serve8
