#include "tokenizer/unicode_nfc.h"

#include <gtest/gtest.h>

namespace serve8 {
namespace {

TEST(UnicodeNfc, ComposesAndOrders) {
  EXPECT_EQ(nfc_normalize("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc_normalize("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(nfc_normalize("\u212b"), "\u00c5");                // a singleton decomposes for good
  EXPECT_EQ(nfc_normalize("\u1100\u1161\u11a8"), "\uac01");    // Hangul jamo compose
  EXPECT_EQ(nfc_normalize("q\u0307\u0323"), "q\u0323\u0307");  // marks reordered by class
  EXPECT_EQ(nfc_normalize("e\u0307\u0323"), "\u1eb9\u0307");   // ẹ first, then the dot above
  EXPECT_EQ(nfc_normalize("\ufb01"), "\ufb01");                // compatibility forms stay
  EXPECT_EQ(nfc_normalize("\u0b47\u0b3e"), "\u0b4b");          // two starters compose
  EXPECT_EQ(nfc_normalize("\u00e9\u0301"), "\u00e9\u0301");    // already NFC
}

}  // namespace
}  // namespace serve8
