#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <unordered_map>
#include <vector>

#include "tokenizer/unicode_nfc_data.h"
#include "core/utf8.h"

namespace serve8 {
namespace {

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12), not by table.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1Fu) : len == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (int k = 1; k < len && i + k < text.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3Fu);
    cps.push_back(cp);
    i += static_cast<std::size_t>(len);
  }
  return cps;
}

int combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCombiningClassRanges);
  const auto* it = std::upper_bound(std::begin(kCombiningClassRanges), end, cp,
                                    [](uint32_t c, const CombiningClassRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClassRanges)) return 0;
  --it;
  return cp <= it->last ? it->combining_class : 0;
}

const CanonicalDecomposition* find_decomposition(uint32_t cp) {
  const auto* end = std::end(kCanonicalDecompositions);
  const auto* it = std::lower_bound(std::begin(kCanonicalDecompositions), end, cp,
                                    [](const CanonicalDecomposition& d, uint32_t c) { return d.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const CanonicalDecomposition* d = cp < 0xC0 ? nullptr : find_decomposition(cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

// The primary composite of a starter and the next character, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  static const std::unordered_map<uint64_t, uint32_t> kComposites = [] {
    std::unordered_map<uint64_t, uint32_t> m;
    for (const CanonicalDecomposition& d : kCanonicalDecompositions) {
      if (d.composes) m.emplace(pair_key(d.first, d.second), d.cp);
    }
    return m;
  }();
  const auto it = kComposites.find(pair_key(a, b));
  return it == kComposites.end() ? 0 : it->second;
}

}  // namespace

std::string nfc_normalize(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(text);
  }
  std::vector<uint32_t> cps;
  for (uint32_t cp : decode_utf8(text)) decompose(cp, cps);

  // Canonical ordering: each run of non-starters sorted by class, stably.
  for (std::size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }

  // Composition: a character joins the last starter unless something between them blocks it (a
  // starter, or a mark of the same or a higher class).
  std::vector<uint32_t> composed;
  composed.reserve(cps.size());
  std::ptrdiff_t starter = -1;
  for (uint32_t cp : cps) {
    const int cc = combining_class(cp);
    if (starter >= 0) {
      const bool adjacent = static_cast<std::ptrdiff_t>(composed.size()) - 1 == starter;
      const int last_cc = adjacent ? -1 : combining_class(composed.back());
      const bool blocked = !adjacent && (last_cc == 0 || last_cc >= cc);
      if (!blocked) {
        if (const uint32_t c = compose(composed[static_cast<std::size_t>(starter)], cp); c != 0) {
          composed[static_cast<std::size_t>(starter)] = c;
          continue;
        }
      }
    }
    composed.push_back(cp);
    if (cc == 0) starter = static_cast<std::ptrdiff_t>(composed.size()) - 1;
  }

  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : composed) append_utf8(out, cp);
  return out;
}

}  // namespace serve8
