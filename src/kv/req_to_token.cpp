#include "kv/req_to_token.h"

#include "core/error.h"

namespace serve8 {

ReqToTokenTable::ReqToTokenTable(int max_requests, int max_context_len)
    : max_requests_(max_requests), max_context_len_(max_context_len) {
  SERVE8_CHECK(max_requests >= 1, "ReqToTokenTable: max_requests must be >= 1, got {}", max_requests);
  SERVE8_CHECK(max_context_len >= 1, "ReqToTokenTable: max_context_len must be >= 1, got {}", max_context_len);
  length_.assign(static_cast<size_t>(max_requests), -1);
  free_rows_.reserve(static_cast<size_t>(max_requests));
  for (int r = max_requests - 1; r >= 0; --r) free_rows_.push_back(r);
}

void ReqToTokenTable::check_row(int row, const char* what) const {
  SERVE8_CHECK(row >= 0 && row < max_requests_, "ReqToTokenTable::{}: row {} out of range [0, {})", what, row,
               max_requests_);
  SERVE8_CHECK(length_[static_cast<size_t>(row)] >= 0, "ReqToTokenTable::{}: row {} is not allocated", what, row);
}

int ReqToTokenTable::allocate() {
  SERVE8_CHECK(can_allocate(), "ReqToTokenTable: all {} request rows are in use", max_requests_);
  const int row = free_rows_.back();
  free_rows_.pop_back();
  length_[static_cast<size_t>(row)] = 0;
  return row;
}

void ReqToTokenTable::free(int row) {
  check_row(row, "free");
  length_[static_cast<size_t>(row)] = -1;
  free_rows_.push_back(row);
}

std::span<const int32_t> ReqToTokenTable::take_new(int row, std::span<const int32_t> slots, int kv_len) {
  check_row(row, "take_new");
  int& len = length_[static_cast<size_t>(row)];
  SERVE8_CHECK(kv_len >= len && kv_len <= max_context_len_ && static_cast<size_t>(kv_len) <= slots.size(),
               "ReqToTokenTable::take_new: row {} holds {} slots; {} asked of {} (context {})", row, len, kv_len,
               slots.size(), max_context_len_);
  const auto fresh = slots.subspan(static_cast<size_t>(len), static_cast<size_t>(kv_len - len));
  len = kv_len;
  return fresh;
}

int ReqToTokenTable::length(int row) const {
  check_row(row, "length");
  return length_[static_cast<size_t>(row)];
}

}  // namespace serve8
