#include "kv/req_to_token.h"

#include "core/error.h"

namespace serve8 {

ReqToTokenTable::ReqToTokenTable(int max_requests, int max_context_len)
    : max_requests_(max_requests), max_context_len_(max_context_len) {
  SERVE8_CHECK(max_requests >= 1, "ReqToTokenTable: max_requests must be >= 1, got {}", max_requests);
  SERVE8_CHECK(max_context_len >= 1, "ReqToTokenTable: max_context_len must be >= 1, got {}", max_context_len);
  rows_.resize(static_cast<size_t>(max_requests));
  in_use_.assign(static_cast<size_t>(max_requests), 0);
  free_rows_.reserve(static_cast<size_t>(max_requests));
  for (int r = max_requests - 1; r >= 0; --r) free_rows_.push_back(r);
}

void ReqToTokenTable::check_row(int row, const char* what) const {
  SERVE8_CHECK(row >= 0 && row < max_requests_, "ReqToTokenTable::{}: row {} out of range [0, {})", what, row,
               max_requests_);
  SERVE8_CHECK(in_use_[static_cast<size_t>(row)], "ReqToTokenTable::{}: row {} is not allocated", what, row);
}

int ReqToTokenTable::allocate() {
  SERVE8_CHECK(can_allocate(), "ReqToTokenTable: all {} request rows are in use", max_requests_);
  int row = free_rows_.back();
  free_rows_.pop_back();
  in_use_[static_cast<size_t>(row)] = 1;
  return row;
}

void ReqToTokenTable::free(int row) {
  check_row(row, "free");
  rows_[static_cast<size_t>(row)].clear();
  in_use_[static_cast<size_t>(row)] = 0;
  free_rows_.push_back(row);
}

bool ReqToTokenTable::can_append(int row, int64_t n) const {
  check_row(row, "can_append");
  return n >= 0 && length(row) + n <= max_context_len_;
}

void ReqToTokenTable::append(int row, std::span<const int32_t> slots) {
  SERVE8_CHECK(can_append(row, static_cast<int64_t>(slots.size())),
               "ReqToTokenTable: row {} has {} tokens, appending {} exceeds the context length {}", row, length(row),
               slots.size(), max_context_len_);
  auto& r = rows_[static_cast<size_t>(row)];
  r.insert(r.end(), slots.begin(), slots.end());
}

void ReqToTokenTable::truncate(int row, int len) {
  check_row(row, "truncate");
  SERVE8_CHECK(len >= 0 && len <= length(row), "ReqToTokenTable: cannot truncate row {} of length {} to {}", row,
               length(row), len);
  rows_[static_cast<size_t>(row)].resize(static_cast<size_t>(len));
}

std::span<const int32_t> ReqToTokenTable::slots(int row) const {
  check_row(row, "slots");
  return rows_[static_cast<size_t>(row)];
}

int ReqToTokenTable::length(int row) const {
  check_row(row, "length");
  return static_cast<int>(rows_[static_cast<size_t>(row)].size());
}

}  // namespace serve8
