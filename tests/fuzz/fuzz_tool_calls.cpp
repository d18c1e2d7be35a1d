// Fuzzes the tool-call parsers (server/tool_calls.h) with what a model may write: the first byte
// picks the markup, the rest is the text. Whole or streamed (cut at a point the second byte picks),
// parsing never throws, and both give the same content and calls; every call's arguments are a
// JSON object.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/tool_calls.h"

namespace {

using serve8::ParsedToolCalls;
using serve8::ToolCallFormat;

void check_same(const ParsedToolCalls& whole, const ParsedToolCalls& streamed) {
  if (whole.content != streamed.content || whole.calls.size() != streamed.calls.size()) std::abort();
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    if (whole.calls[i].name != streamed.calls[i].name || whole.calls[i].arguments_json != streamed.calls[i].arguments_json)
      std::abort();
    if (!nlohmann::json::parse(whole.calls[i].arguments_json, nullptr, false).is_object()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static constexpr ToolCallFormat kFormats[] = {ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                                                ToolCallFormat::kMistral, ToolCallFormat::kJsonArray};
  serve8::ToolCallSyntax syntax;
  syntax.format = kFormats[data[0] % 4];
  if (data[0] & 4) syntax.names = {"get_weather", "f"};
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const ParsedToolCalls whole = serve8::parse_tool_calls(syntax, text);
  serve8::ToolCallStream stream(syntax);
  const size_t cut = text.empty() ? 0 : data[1] % (text.size() + 1);
  ParsedToolCalls streamed = stream.push(text.substr(0, cut));
  for (const ParsedToolCalls& part : {stream.push(text.substr(cut)), stream.finish()}) {
    streamed.content += part.content;
    streamed.calls.insert(streamed.calls.end(), part.calls.begin(), part.calls.end());
  }
  check_same(whole, streamed);
  return 0;
}
