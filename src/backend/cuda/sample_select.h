// The CUDA sampler's selection without a sort (plain code, built without CUDA, so CPU tests run
// it). The contract (backend/cpu/cpu_sampling.cpp) cuts a prefix of the candidates sorted by e
// descending, ties by lower id, and draws in that order; both need only a position in the sorted
// order, which a radix select finds from histograms: e > 0 is a float below 2, so its bits order
// like the floats, and three levels of 10-bit digits, from the top, narrow the key at a position
// to one value. Each level's bins hold a count and a mass (e in fixed point: integer sums are
// exact in any order, so the blocks of a row add them with atomics and the answer stays the same).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/dtype.h"

namespace serve8 {

constexpr int kSelectBits = 10;
constexpr int kSelectBins = 1 << kSelectBits;
constexpr int kSelectLevels = 3;  // 30 bits: the key of any e < 2
// e in units of 2^-43: below 2^44 each (e < 2), so the mass of 2^20 tokens stays below 2^64.
constexpr float kSelectMassScale = 8796093022208.0f;  // 2^43
constexpr int64_t kSelectMaxVocab = int64_t{1} << 20;

// The order of e > 0 is the order of its bits.
SERVE8_HD uint32_t select_key(float e) { return f32_to_bits(e); }

SERVE8_HD uint64_t select_mass(float e) { return static_cast<uint64_t>(e * kSelectMassScale); }

// The key's digit at `level` (0 is the top one).
SERVE8_HD uint32_t select_digit(uint32_t key, int level) {
  return (key >> (kSelectBits * (kSelectLevels - 1 - level))) & (kSelectBins - 1);
}

// Whether the key's digits above `level` are `prefix` (every key is at level 0).
SERVE8_HD bool select_in(uint32_t key, int level, uint32_t prefix) {
  return level == 0 || (key >> (kSelectBits * (kSelectLevels - level))) == prefix;
}

enum SelectPhase : int {
  kSelectDone = 0,  // token, or -1: the first token at the maximum
  kSelectCut = 1,   // finding n, the number of candidates top_k and top_p keep
  kSelectDraw = 2,  // finding the drawn position among the first n
  kSelectTies = 3,  // the drawn key is shared: the tie_rank-th token with it, in id order
};

// One row's selection between passes. It and SelectBin are plain structs (no member initializers),
// as __shared__ memory takes them.
struct SelectState {
  int phase;
  int level;                           // the level the next histogram is of
  uint32_t prefix;                     // the digits chosen above `level`; in kSelectTies the whole key
  uint64_t count_before, mass_before;  // candidates above the prefix's range
  uint64_t goal_count;                 // kSelectCut: top_k, or all ones
  double goal_mass;                    // kSelectCut: top_p * total, where mass_goal
  bool mass_goal;
  uint32_t cut_key;   // the last kept key, and how many tokens with it are kept
  uint64_t cut_ties;  // 0: no cut
  uint64_t target;    // kSelectDraw: u * kept, below kept
  uint64_t tie_rank;
  float u;
  int token;
};

// The first nonempty bin, from the top digit down, whose cumulative (count, mass) meets the
// phase's goal; count_before and mass_before include everything above it.
struct SelectBin {
  bool found;
  uint32_t digit;
  uint64_t count_before, mass_before;
  uint64_t count;
  uint32_t min_id;  // the lowest id in the bin (read at the last level)
};

// A finished selection that names no token.
SERVE8_HD SelectState select_none() {
  SelectState s{};
  s.token = -1;
  return s;
}

SERVE8_HD bool select_goal(const SelectState& s, uint64_t count, uint64_t mass) {
  if (s.phase == kSelectDraw) return mass > s.target;
  return count >= s.goal_count || (s.mass_goal && static_cast<double>(mass) >= s.goal_mass);
}

SERVE8_HD void select_draw_from(SelectState& s, uint64_t kept, uint32_t cut_key, uint64_t cut_ties) {
  s.phase = kSelectDraw;
  s.level = 0;
  s.prefix = 0;
  s.count_before = s.mass_before = 0;
  s.cut_key = cut_key;
  s.cut_ties = cut_ties;
  const auto t = static_cast<uint64_t>(static_cast<double>(s.u) * static_cast<double>(kept));
  s.target = t < kept ? t : kept - 1;
}

// After the first pass: candidates (e > 0, e >= min_p) number `count` with mass `cand_mass`;
// `total` is the mass of every e (top_p's denominator).
SERVE8_HD void select_begin(SelectState& s, uint64_t count, uint64_t total, uint64_t cand_mass, int top_k, float top_p,
                            float u) {
  s = select_none();
  s.goal_count = std::numeric_limits<uint64_t>::max();
  s.u = u;
  const bool k_cut = top_k > 0 && static_cast<uint64_t>(top_k) < count;
  const bool p_cut = top_p < 1.0f;
  if (!k_cut && !p_cut) {
    select_draw_from(s, cand_mass, 0, 0);
    return;
  }
  s.phase = kSelectCut;
  if (k_cut) s.goal_count = static_cast<uint64_t>(top_k);
  s.mass_goal = p_cut;
  s.goal_mass = static_cast<double>(top_p) * static_cast<double>(total);
}

// Moves the selection on by the bin the current level's scan found.
SERVE8_HD void select_resolve(SelectState& s, const SelectBin& b, uint64_t cand_mass) {
  if (!b.found) {
    // A cut that is never reached keeps every candidate; a draw always lands (target < kept).
    if (s.phase == kSelectCut) {
      select_draw_from(s, cand_mass, 0, 0);
    } else {
      s.phase = kSelectDone;
      s.token = -1;
    }
    return;
  }
  if (s.level + 1 < kSelectLevels) {
    s.prefix = (s.prefix << kSelectBits) | b.digit;
    ++s.level;
    s.count_before = b.count_before;
    s.mass_before = b.mass_before;
    return;
  }
  const uint32_t key = (s.prefix << kSelectBits) | b.digit;
  const uint64_t m = select_mass(bits_to_f32(key));
  if (s.phase == kSelectCut) {
    // Of the bin's tokens (all with this key), the fewest that meet a goal.
    uint64_t j = b.count;
    if (s.goal_count > b.count_before && s.goal_count <= b.count_before + b.count) j = s.goal_count - b.count_before;
    if (s.mass_goal && static_cast<double>(b.mass_before + b.count * m) >= s.goal_mass) {
      const double need = s.goal_mass - static_cast<double>(b.mass_before);
      uint64_t jm = need <= 0.0 || m == 0 ? 1 : static_cast<uint64_t>(ceil(need / static_cast<double>(m)));
      if (jm < 1) jm = 1;
      if (jm > b.count) jm = b.count;
      // The division's rounding, settled against the sums themselves.
      while (jm > 1 && static_cast<double>(b.mass_before + (jm - 1) * m) >= s.goal_mass) --jm;
      while (jm < b.count && static_cast<double>(b.mass_before + jm * m) < s.goal_mass) ++jm;
      if (jm < j) j = jm;
    }
    select_draw_from(s, b.mass_before + j * m, key, j);
    return;
  }
  uint64_t j = m > 0 ? (s.target - b.mass_before) / m + 1 : 1;
  if (j > b.count) j = b.count;
  if (s.cut_ties > 0 && key == s.cut_key && j > s.cut_ties) j = s.cut_ties;
  if (j <= 1) {
    s.phase = kSelectDone;
    s.token = static_cast<int>(b.min_id);
  } else {
    s.phase = kSelectTies;
    s.prefix = key;
    s.tie_rank = j;
  }
}

}  // namespace serve8
