// ReqToTokenTable: the host side of the KV cache's request -> slot table (KvCache::req_to_token,
// on the device): which rows are in use, and how many leading slots of each row the device holds
// already, so that a step sends only the rest (ForwardBatch::new_slots) and host work per decode
// step grows with the batch, not with the context. The slots themselves stay with their request;
// rows own nothing, and freeing a row frees no slot.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace serve8 {

class ReqToTokenTable {
 public:
  ReqToTokenTable(int max_requests, int max_context_len);

  bool can_allocate() const { return !free_rows_.empty(); }
  // An empty row. Throws serve8::Error if all max_requests rows are in use.
  int allocate();
  // Gives the row back (its length drops to 0). Throws if the row is not in use.
  void free(int row);

  // The part of `slots` (a request's, in position order) the device row lacks up to kv_len, which
  // the caller sends with the step; the row then counts kv_len slots. Throws past max_context_len,
  // or if kv_len is below what the row holds (slots never leave a row but with it).
  std::span<const int32_t> take_new(int row, std::span<const int32_t> slots, int kv_len);
  int length(int row) const;

  int num_rows_free() const { return static_cast<int>(free_rows_.size()); }
  int num_rows_used() const { return max_requests_ - num_rows_free(); }
  int max_requests() const { return max_requests_; }
  int max_context_len() const { return max_context_len_; }

 private:
  void check_row(int row, const char* what) const;

  int max_requests_;
  int max_context_len_;
  std::vector<int> length_;  // -1: free
  std::vector<int> free_rows_;  // a stack; row 0 is handed out first
};

}  // namespace serve8
