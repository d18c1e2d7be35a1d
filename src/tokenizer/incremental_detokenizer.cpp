#include "tokenizer/incremental_detokenizer.h"

#include <algorithm>

#include "core/utf8.h"

namespace serve8 {
namespace {

// A character is at most 4 bytes, so at most 3 trailing byte tokens can be waiting for the rest.
constexpr int kMaxUnfinishedTokens = 3;
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Text that may still change when more ids arrive: SentencePiece prints an unfinished byte
// sequence as U+FFFD, a raw byte-level decoder leaves a truncated sequence. Either way, wait.
bool may_change(std::string_view text) {
  return text.ends_with(kReplacementChar) || incomplete_utf8_suffix_length(text) > 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::span<const int32_t> context)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  const std::size_t keep = std::min(context.size(), kMaxContextTokens);
  ids_.assign(context.end() - static_cast<std::ptrdiff_t>(keep), context.end());
  read_offset_ = ids_.size();
  // A context that ends inside a character (a prompt given as ids can) leaves that character to
  // the output: counting its bytes as already emitted would emit the rest of it as garbage.
  for (int back = 0; back < kMaxUnfinishedTokens && read_offset_ > 0; ++back) {
    const std::span<const int32_t> head(ids_.data(), read_offset_);
    if (!may_change(tokenizer_.decode(head, skip_special_tokens_))) break;
    --read_offset_;
  }
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  try {
    std::string delta = emit(/*final_chunk=*/false);
    ++num_pushed_;
    return delta;
  } catch (...) {
    // An id decode rejects (outside the vocabulary) must not poison every later push.
    ids_.pop_back();
    throw;
  }
}

std::string IncrementalDetokenizer::flush() { return emit(/*final_chunk=*/true); }

std::string IncrementalDetokenizer::emit(bool final_chunk) {
  const std::span<const int32_t> ids(ids_);
  // Decoding from prefix_offset_ rather than read_offset_ matters: decode drops the leading space
  // of the first piece, so "▁world" alone is "world", while after "▁Hello" it is " world".
  const std::string prefix_text =
      tokenizer_.decode(ids.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_.decode(ids.subspan(prefix_offset_), skip_special_tokens_);
  if (new_text.size() <= prefix_text.size() || (!final_chunk && may_change(new_text))) return {};

  // The prefix text ends on a finished character (that is when offsets move), so it is a prefix
  // of the longer decode and the rest starts on a character boundary. A decoder without that
  // property would make the cut land mid-character; resuming at the last shared character boundary
  // repeats a little text but never sends a broken one.
  std::size_t start = prefix_text.size();
  if (!new_text.starts_with(prefix_text)) {
    start = static_cast<std::size_t>(
        std::mismatch(prefix_text.begin(), prefix_text.end(), new_text.begin(), new_text.end()).second -
        new_text.begin());
    while (start > 0 && (static_cast<unsigned char>(new_text[start]) & 0xC0) == 0x80) --start;
  }
  std::string delta = new_text.substr(start);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Ids before prefix_offset_ never matter again; dropping them keeps the buffer small.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
  read_offset_ -= prefix_offset_;
  prefix_offset_ = 0;
  return delta;
}

}  // namespace serve8
