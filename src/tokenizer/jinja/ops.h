// Python's operators on Jinja values (arithmetic, concatenation, membership, slicing, iteration),
// keeping the untrusted ranges of strings through the operations that move text unchanged.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace serve8::jinja {

// Python's iteration over a value: list/tuple items, dict keys, string characters (each keeping
// its taint), nothing for Undefined; TypeError otherwise.
std::vector<Value> iterate(const Value& v);

// Python's binary operators other than comparisons: + - * / // % ** and jinja's ~.
Value binary_op(std::string_view op, const Value& a, const Value& b);
// a in b.
bool contains(const Value& container, const Value& item);
// Python's a[start:stop:step] on a list, tuple or string (absent parts null).
Value slice(const Value& object, const Value* start, const Value* stop, const Value* step);

}  // namespace serve8::jinja
