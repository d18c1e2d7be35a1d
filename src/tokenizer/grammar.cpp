#include "tokenizer/grammar.h"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <variant>
#include <xgrammar/xgrammar.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {

class Grammar {
 public:
  Grammar(xgrammar::CompiledGrammar compiled, int vocab_size) : compiled(std::move(compiled)), vocab_size(vocab_size) {}
  xgrammar::CompiledGrammar compiled;
  int vocab_size;
};

struct GrammarCompiler::Impl {
  // RAW vocabulary: each token's bytes as they appear in the output, so one code path serves
  // SentencePiece, byte-fallback and byte-level vocabularies; special ids are empty (never allowed).
  static xgrammar::TokenizerInfo vocabulary(const Tokenizer& tokenizer, int vocab_size, std::vector<int> stop_ids) {
    const int n = std::min(tokenizer.vocab_size(), vocab_size);
    std::vector<std::string> encoded(static_cast<size_t>(n));
    for (int id = 0; id < n; ++id) encoded[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
    std::vector<int32_t> stops;
    for (int id : stop_ids)
      if (id >= 0 && id < vocab_size) stops.push_back(id);
    return xgrammar::TokenizerInfo(encoded, xgrammar::VocabType::RAW, vocab_size, stops, false);
  }
  Impl(const Tokenizer& tokenizer, int vocab_size, std::vector<int> stop_ids)
      : vocab_size(vocab_size), compiler(vocabulary(tokenizer, vocab_size, std::move(stop_ids)), /*max_threads=*/2) {}
  int vocab_size;
  mutable xgrammar::GrammarCompiler compiler;
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int vocab_size, std::vector<int> stop_ids)
    : impl_(std::make_unique<Impl>(tokenizer, vocab_size, std::move(stop_ids))) {}
GrammarCompiler::~GrammarCompiler() = default;

int GrammarCompiler::vocab_size() const { return impl_->vocab_size; }

std::shared_ptr<const Grammar> GrammarCompiler::compile(const GrammarSpec& spec) const {
  using Kind = GrammarSpec::Kind;
  try {
    auto make = [this](xgrammar::CompiledGrammar g) { return std::make_shared<const Grammar>(std::move(g), impl_->vocab_size); };
    switch (spec.kind) {
      // No free whitespace (", " and ": " only, as json.dumps writes): a model cannot pad forever.
      case Kind::kJsonSchema:
        return make(impl_->compiler.CompileJSONSchema(spec.text, /*any_whitespace=*/false));
      case Kind::kJsonObject:
        return make(impl_->compiler.CompileBuiltinJSONGrammar());
      case Kind::kRegex:
        return make(impl_->compiler.CompileRegex(spec.text));
      case Kind::kEbnf:
        return make(impl_->compiler.CompileGrammar(spec.text, "root"));
      case Kind::kStructuralTag:
        return make(impl_->compiler.CompileStructuralTag(spec.text));
      case Kind::kNone:
        break;
    }
  } catch (const std::exception& e) {
    // xgrammar's messages open with "[time] file.cc:line: "; the client needs only the reason.
    std::string what = e.what();
    if (const size_t cc = what.find(".cc:"); !what.empty() && what[0] == '[' && cc != std::string::npos)
      if (const size_t colon = what.find(": ", cc); colon != std::string::npos) what.erase(0, colon + 2);
    while (!what.empty() && std::isspace(static_cast<unsigned char>(what.back()))) what.pop_back();
    throw Error(what);
  }
  throw Error("no grammar to compile");
}

struct GrammarMatcher::Impl {
  explicit Impl(std::shared_ptr<const Grammar> g) : grammar(std::move(g)), matcher(grammar->compiled) {}
  std::shared_ptr<const Grammar> grammar;
  xgrammar::GrammarMatcher matcher;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : impl_(std::make_unique<Impl>(std::move(grammar))) {}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

int GrammarMatcher::mask_words() const { return xgrammar::GetBitmaskSize(impl_->grammar->vocab_size); }

bool GrammarMatcher::fill_next_mask(std::span<int32_t> words) {
  SERVE8_CHECK(static_cast<int>(words.size()) == mask_words(), "grammar mask: {} words given, {} needed",
               words.size(), mask_words());
  int64_t shape = static_cast<int64_t>(words.size());
  DLTensor t{};
  t.data = words.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = &shape;
  return impl_->matcher.FillNextTokenBitmask(&t);
}

bool GrammarMatcher::accept(int32_t token) { return impl_->matcher.AcceptToken(token); }

bool GrammarMatcher::terminated() const { return impl_->matcher.IsTerminated(); }

struct GrammarMaskFiller::Impl {
  explicit Impl(int threads) : batch(threads > 0 ? std::variant<std::string, int32_t>(threads) : std::string("auto")) {}
  xgrammar::BatchGrammarMatcher batch;
  std::vector<xgrammar::GrammarMatcher> handles;  // share their matchers' state
};

GrammarMaskFiller::GrammarMaskFiller(int threads) : impl_(std::make_unique<Impl>(threads)) {}
GrammarMaskFiller::~GrammarMaskFiller() = default;

void GrammarMaskFiller::fill(std::span<GrammarMatcher* const> matchers, std::span<int32_t> words) {
  if (matchers.empty()) return;
  const int w = matchers[0]->mask_words();
  SERVE8_CHECK(words.size() == matchers.size() * static_cast<size_t>(w), "grammar masks: {} words for {} matchers of {}",
               words.size(), matchers.size(), w);
  impl_->handles.clear();
  for (GrammarMatcher* m : matchers) {
    SERVE8_CHECK(m->mask_words() == w, "grammar masks: matchers of {} and {} words in one batch", w, m->mask_words());
    impl_->handles.push_back(m->impl_->matcher);
  }
  int64_t shape[2] = {static_cast<int64_t>(matchers.size()), w};
  DLTensor t{};
  t.data = words.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  impl_->batch.BatchFillNextTokenBitmask(&impl_->handles, &t);
}

}  // namespace serve8
