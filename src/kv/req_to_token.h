// ReqToTokenTable: for each running request, the KV slots of its tokens in position order.
//
// The engine builds ForwardBatch::kv_indices from these rows. A row is a small integer the engine
// keeps with the request; the number of rows bounds the running batch (--max-running-requests).
// Rows own nothing: the slots in a row belong to the SlotAllocator/RadixCache protocol described
// in kv/radix_cache.h, and freeing a row does not free its slots.
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

  bool can_append(int row, int64_t n) const;
  // Appends slots after the row's current ones. Throws if the row would exceed max_context_len.
  void append(int row, std::span<const int32_t> slots);
  // Keeps the first len slots; read the dropped ones from slots(row) first if they need freeing.
  void truncate(int row, int len);

  // Valid until the next append/truncate/free of this row.
  std::span<const int32_t> slots(int row) const;
  int length(int row) const;

  int num_rows_free() const { return static_cast<int>(free_rows_.size()); }
  int num_rows_used() const { return max_requests_ - num_rows_free(); }
  int max_requests() const { return max_requests_; }
  int max_context_len() const { return max_context_len_; }

 private:
  void check_row(int row, const char* what) const;

  int max_requests_;
  int max_context_len_;
  // A vector per row rather than one dense [max_requests, max_context_len] array: the dense table
  // SGLang keeps on the GPU would cost gigabytes of host memory at 4096 rows x 128k context, while
  // rows here only grow to what their requests use (and keep that capacity for the next one).
  std::vector<std::vector<int32_t>> rows_;
  std::vector<uint8_t> in_use_;
  std::vector<int> free_rows_;  // a stack; row 0 is handed out first
};

}  // namespace serve8
