#include "tokenizer/unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace serve8 {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "unknown PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buffer));
}

// Match data is per thread and sized for the largest pattern seen, so matching allocates nothing
// in the steady state and needs no lock.
struct MatchData {
  pcre2_match_data* data = nullptr;
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

struct UnicodeRegex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

UnicodeRegex::UnicodeRegex(const std::string& pattern) : pattern_(pattern), code_(std::make_unique<Code>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &error, &offset, nullptr);
  SERVE8_CHECK(code_->code != nullptr, "cannot compile the regex '{}': {} at offset {}", pattern, pcre2_message(error),
               offset);
  // Without JIT support (some platforms) the interpreter gives the same matches, only slower.
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

UnicodeRegex::~UnicodeRegex() = default;

std::vector<std::pair<std::size_t, std::size_t>> UnicodeRegex::find_all(std::string_view text) const {
  // Only the whole match is read; PCRE2 reports as many groups as fit, so one pair is enough.
  thread_local MatchData match;
  if (match.data == nullptr) match.data = pcre2_match_data_create(1, nullptr);

  std::vector<std::pair<std::size_t, std::size_t>> matches;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start < text.size()) {
    // The text was validated once; re-checking UTF-8 on every call would make this quadratic.
    int rc = PCRE2_ERROR_JIT_STACKLIMIT;
    if (code_->jit) {
      rc = pcre2_jit_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.data, nullptr);
    }
    // The interpreter keeps its backtracking state on the heap, so it also covers the rare
    // subject that overflows the JIT's fixed stack.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    SERVE8_CHECK(rc >= 0, "regex '{}' failed on a text of {} bytes: {}", pattern_, text.size(), pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const std::size_t begin = ovector[0];
    const std::size_t end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
    } else {
      // An empty match says nothing about where tokens split; step over one whole character.
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  return matches;
}

}  // namespace serve8
