// Unicode tables for NFC (unicode_nfc.cpp), generated into unicode_nfc_data.cpp by
// gen_unicode_nfc_data.py. Both arrays are sorted by code point.
#pragma once

#include <cstdint>

namespace serve8 {

struct CombiningClassRange {
  uint32_t first;
  uint32_t last;
  uint8_t combining_class;
};

// One level of a canonical decomposition: `cp` -> `first` `second` (0: a singleton). `composes`
// marks the primary composites, the ones NFC recomposes.
struct CanonicalDecomposition {
  uint32_t cp;
  uint32_t first;
  uint32_t second;
  uint8_t composes;
};

extern const CombiningClassRange kCombiningClassRanges[382];
extern const CanonicalDecomposition kCanonicalDecompositions[2061];

}  // namespace serve8
