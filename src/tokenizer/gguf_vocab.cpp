#include "tokenizer/gguf_vocab.h"

#include <algorithm>

#include "core/error.h"
#include "formats/gguf_file.h"

namespace serve8 {
namespace {

// Typed reads of the tokenizer.* keys, absent keys left empty; a key of the wrong kind throws
// "<file>: metadata '<key>' is not <kind>".
class Keys {
 public:
  explicit Keys(const GgufFile& f) : f_(f) {}

  void string(const char* key, std::string& out) const {
    if (f_.has(key)) out = f_.get_string(key);
  }
  void integer(const char* key, std::optional<int64_t>& out) const {
    if (f_.has(key)) out = f_.get_int(key);
  }
  void boolean(const char* key, std::optional<bool>& out) const {
    if (!f_.has(key)) return;
    const GgufValue& v = f_.metadata().at(key);
    // llama.cpp writes bools; some converters wrote small integers.
    SERVE8_CHECK(v.kind == GgufValue::Kind::kBool || v.kind == GgufValue::Kind::kInt, "{}: metadata '{}' is not a bool",
                 f_.path(), key);
    out = v.kind == GgufValue::Kind::kBool ? v.b : v.i != 0;
  }
  // An array whose elements are all of one of `kinds`, each turned into T by `convert`.
  template <typename T, typename Convert>
  void array(const char* key, const char* expected, std::initializer_list<GgufValue::Kind> kinds, std::vector<T>& out,
             Convert convert) const {
    if (!f_.has(key)) return;
    const GgufValue& v = f_.metadata().at(key);
    SERVE8_CHECK(v.kind == GgufValue::Kind::kArray, "{}: metadata '{}' is not {}", f_.path(), key, expected);
    out.reserve(v.array.size());
    for (const GgufValue& e : v.array) {
      SERVE8_CHECK(std::find(kinds.begin(), kinds.end(), e.kind) != kinds.end(), "{}: metadata '{}' is not {}",
                   f_.path(), key, expected);
      out.push_back(convert(e));
    }
  }

 private:
  const GgufFile& f_;
};

}  // namespace

GgufVocab read_gguf_vocab(const std::string& path) {
  const GgufFile f(path, GgufPart::kMetadata);
  const Keys keys(f);
  using K = GgufValue::Kind;
  GgufVocab vocab;
  vocab.source = path;
  keys.string("tokenizer.ggml.model", vocab.model);
  keys.string("tokenizer.ggml.pre", vocab.pre);
  keys.string("tokenizer.chat_template", vocab.chat_template);
  auto text = [](const GgufValue& e) { return e.s; };
  keys.array("tokenizer.ggml.tokens", "an array of strings", {K::kString}, vocab.tokens, text);
  keys.array("tokenizer.ggml.merges", "an array of strings", {K::kString}, vocab.merges, text);
  keys.array(
      "tokenizer.ggml.scores", "an array of numbers", {K::kFloat, K::kInt}, vocab.scores,
      [](const GgufValue& e) { return static_cast<float>(e.kind == K::kFloat ? e.f : static_cast<double>(e.i)); });
  keys.array("tokenizer.ggml.token_type", "an array of integers", {K::kInt}, vocab.token_types,
             [](const GgufValue& e) { return static_cast<int32_t>(e.i); });
  keys.integer("tokenizer.ggml.bos_token_id", vocab.bos_id);
  keys.integer("tokenizer.ggml.eos_token_id", vocab.eos_id);
  keys.integer("tokenizer.ggml.unknown_token_id", vocab.unk_id);
  keys.integer("tokenizer.ggml.eot_token_id", vocab.eot_id);
  keys.integer("tokenizer.ggml.eom_token_id", vocab.eom_id);
  keys.boolean("tokenizer.ggml.add_bos_token", vocab.add_bos);
  keys.boolean("tokenizer.ggml.add_eos_token", vocab.add_eos);
  keys.boolean("tokenizer.ggml.add_space_prefix", vocab.add_space_prefix);
  return vocab;
}

}  // namespace serve8
