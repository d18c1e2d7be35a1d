#include "server/tool_calls.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <nlohmann/json.hpp>
#include <utility>

namespace serve8 {

namespace {

using OJson = nlohmann::ordered_json;

constexpr size_t npos = std::string_view::npos;
constexpr std::string_view kWhitespace = " \t\r\n";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";

bool is_space(char c) { return kWhitespace.find(c) != npos; }

size_t skip(std::string_view text, size_t i, std::string_view chars) {
  while (i < text.size() && chars.find(text[i]) != npos) ++i;
  return i;
}

// The end of the JSON object or array opening at `begin` (one past its closing bracket), by
// bracket depth outside strings; npos while it is unfinished. The parse that follows validates it.
size_t json_value_end(std::string_view text, size_t begin) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return npos;
}

// {"name": .., "arguments" | "parameters": {..}} as a call of a declared tool. Arguments a model
// wrote as a JSON string holding the object are taken too; missing ones are {}.
std::optional<ToolCall> call_from_json(const OJson& j, const std::vector<std::string>& names) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  if (!names.empty() && std::find(names.begin(), names.end(), call.name) == names.end()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  OJson value = args == j.end() ? OJson::object() : *args;
  if (value.is_string()) value = OJson::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) return std::nullopt;
  call.arguments_json = value.dump(-1, ' ', false, OJson::error_handler_t::replace);
  return call;
}

OJson parse_json(std::string_view text) {
  try {
    return OJson::parse(text, nullptr, /*allow_exceptions=*/false);
  } catch (const OJson::exception&) {  // a number beyond double throws even so
    return OJson(OJson::value_t::discarded);
  }
}

// One JSON object, surrounded by nothing but whitespace, as a call.
std::optional<ToolCall> call_in(std::string_view text, const std::vector<std::string>& names) {
  const size_t begin = skip(text, 0, kWhitespace);
  if (begin == text.size() || text[begin] != '{') return std::nullopt;
  const size_t end = json_value_end(text, begin);
  if (end == npos || skip(text, end, kWhitespace) != text.size()) return std::nullopt;
  return call_from_json(parse_json(text.substr(begin, end - begin)), names);
}

// The longest proper prefix of `marker` that the text (from `from` on) ends with: it may become
// the marker.
size_t partial_marker(std::string_view text, size_t from, std::string_view marker) {
  const size_t max = std::min(marker.size() - 1, text.size() - from);
  for (size_t len = max; len > 0; --len)
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

// A call's markup: [begin, end) of the text, with the whitespace on both sides.
struct Span {
  size_t begin = 0;
  size_t end = 0;
  std::vector<ToolCall> calls;
};

// What a scan decided: the calls' spans, and the offset from which the text is undecided (the
// text's size once it is whole). Content is the text before `hold` outside the spans.
struct Scan {
  std::vector<Span> spans;
  size_t hold = 0;
};

class Scanner {
 public:
  Scanner(const ToolCallSyntax& syntax, std::string_view text, bool final)
      : syntax_(syntax), text_(text), final_(final) {
    scan_.hold = text.size();
  }

  Scan run() && {
    switch (syntax_.format) {
      case ToolCallFormat::kNone:
        break;
      case ToolCallFormat::kHermes:
        hermes();
        break;
      case ToolCallFormat::kLlama3:
        llama3();
        break;
      case ToolCallFormat::kMistral:
        mistral();
        break;
      case ToolCallFormat::kJsonArray:
        json_array();
        break;
    }
    return std::move(scan_);
  }

 private:
  size_t floor() const { return scan_.spans.empty() ? 0 : scan_.spans.back().end; }

  // Text from `at` is undecided, and so is the whitespace before it (a call may claim it).
  void hold_at(size_t at) {
    while (at > floor() && is_space(text_[at - 1])) --at;
    scan_.hold = at;
  }

  // Plain text up to the end, whose tail may still become `marker`.
  void hold_tail(size_t from, std::string_view marker) {
    if (!final_) hold_at(text_.size() - partial_marker(text_, from, marker));
  }

  void add_span(size_t begin, size_t end, std::vector<ToolCall> calls, std::string_view trailing = kWhitespace) {
    while (begin > floor() && is_space(text_[begin - 1])) --begin;
    scan_.spans.push_back({begin, skip(text_, end, trailing), std::move(calls)});
  }

  void hermes() {
    size_t pos = 0;
    for (;;) {
      const size_t open = text_.find(kHermesOpen, pos);
      if (open == npos) return hold_tail(pos, kHermesOpen);
      const size_t body = open + kHermesOpen.size();
      const size_t close = text_.find(kHermesClose, body);
      if (close == npos) {
        if (!final_) return hold_at(open);
        // An unclosed last block (the model stopped right after the JSON) still counts when whole.
        if (auto call = call_in(text_.substr(body), syntax_.names)) add_span(open, text_.size(), {std::move(*call)});
        return;
      }
      pos = close + kHermesClose.size();
      if (auto call = call_in(text_.substr(body, close - body), syntax_.names)) {
        add_span(open, pos, {std::move(*call)});
        pos = scan_.spans.back().end;
      }
    }
  }

  // Llama 3's calls from `at`: JSON objects separated by ';'. The span of the first starts at
  // `begin` (the tag, or the start of the text). Returns where plain text resumes, npos at the end.
  size_t llama3_calls(size_t begin, size_t at, size_t resume_if_none) {
    bool any = false;
    for (size_t i = at;;) {
      if (any) i = skip(text_, i, " \t\r\n;");
      if (i == text_.size()) {
        if (any) return npos;
        if (final_) return resume_if_none;
        hold_at(begin);
        return npos;
      }
      if (text_[i] != '{') return any ? i : resume_if_none;
      const size_t end = json_value_end(text_, i);
      if (end == npos && !final_) {
        hold_at(any ? i : begin);
        return npos;
      }
      std::optional<ToolCall> call;
      if (end != npos) call = call_from_json(parse_json(text_.substr(i, end - i)), syntax_.names);
      if (!call) return any ? i : resume_if_none;
      add_span(any ? i : begin, end, {std::move(*call)}, " \t\r\n;");
      any = true;
      i = end;
    }
  }

  void llama3() {
    // A reply that is a bare JSON object is a call too: Llama 3 writes the tag only in ipython mode.
    size_t pos = 0;
    const size_t first = skip(text_, 0, kWhitespace);
    if (first == text_.size()) return hold_tail(0, kPythonTag);
    if (text_[first] == '{') {
      pos = llama3_calls(0, first, first + 1);
      if (pos == npos) return;
    }
    for (;;) {
      const size_t tag = text_.find(kPythonTag, pos);
      if (tag == npos) return hold_tail(pos, kPythonTag);
      const size_t after = tag + kPythonTag.size();
      pos = llama3_calls(tag, skip(text_, after, kWhitespace), after);
      if (pos == npos) return;
    }
  }

  // After [TOOL_CALLS] at `tag`: a list of calls, one call object, or name[ARGS]{..}. Returns
  // where plain text resumes, npos when the rest is undecided.
  size_t mistral_calls(size_t tag) {
    const size_t after = tag + kMistralTag.size();
    const size_t i = skip(text_, after, kWhitespace);
    auto undecided = [&] {
      if (final_) return after;
      hold_at(tag);
      return npos;
    };
    if (i == text_.size()) return undecided();
    if (text_[i] == '[' || text_[i] == '{') {
      const size_t end = json_value_end(text_, i);
      if (end == npos) return undecided();
      const OJson j = parse_json(text_.substr(i, end - i));
      std::vector<ToolCall> calls;
      for (const OJson& item : j.is_array() ? j : OJson::array({j})) {
        std::optional<ToolCall> call = call_from_json(item, syntax_.names);
        if (!call) return after;
        calls.push_back(std::move(*call));
      }
      if (calls.empty()) return after;
      add_span(tag, end, std::move(calls));
      return scan_.spans.back().end;
    }
    // Mistral's newer tokenizers (v11+): [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}.
    size_t name_end = i;
    while (name_end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[name_end])) ||
                                       text_[name_end] == '_' || text_[name_end] == '-' || text_[name_end] == '.'))
      ++name_end;
    if (name_end == i) return after;
    const std::string_view rest = text_.substr(name_end);
    if (rest.size() < kMistralArgs.size())
      return kMistralArgs.starts_with(rest) ? undecided() : after;
    if (!rest.starts_with(kMistralArgs)) return after;
    const size_t args = name_end + kMistralArgs.size();
    if (args == text_.size()) return undecided();
    if (text_[args] != '{') return after;
    const size_t end = json_value_end(text_, args);
    if (end == npos) return undecided();
    OJson j = OJson::object();
    j["name"] = std::string(text_.substr(i, name_end - i));
    j["arguments"] = parse_json(text_.substr(args, end - args));
    std::optional<ToolCall> call = call_from_json(j, syntax_.names);
    if (!call) return after;
    add_span(tag, end, {std::move(*call)});
    return scan_.spans.back().end;
  }

  void mistral() {
    for (size_t pos = 0;;) {
      const size_t tag = text_.find(kMistralTag, pos);
      if (tag == npos) return hold_tail(pos, kMistralTag);
      pos = mistral_calls(tag);
      if (pos == npos) return;
    }
  }

  // tool_choice "required": the calls are the leading elements that are calls; anything after
  // the first one that is not stays text.
  void json_array() {
    const size_t open = skip(text_, 0, kWhitespace);
    if (open == text_.size()) {
      if (!final_) hold_at(0);
      return;
    }
    if (text_[open] != '[') return;
    bool any = false;
    for (size_t i = open + 1;;) {
      i = skip(text_, i, any ? " \t\r\n," : kWhitespace);
      if (i == text_.size()) {
        if (!final_) hold_at(any ? i : 0);
        return;
      }
      if (any && text_[i] == ']') {
        scan_.spans.back().end = skip(text_, i + 1, kWhitespace);
        return;
      }
      if (text_[i] != '{') return;
      const size_t end = json_value_end(text_, i);
      if (end == npos) {
        if (!final_) hold_at(any ? i : 0);
        return;
      }
      std::optional<ToolCall> call = call_from_json(parse_json(text_.substr(i, end - i)), syntax_.names);
      if (!call) return;
      add_span(any ? i : 0, end, {std::move(*call)}, " \t\r\n,");
      any = true;
      i = end;
    }
  }

  const ToolCallSyntax& syntax_;
  std::string_view text_;
  bool final_;
  Scan scan_;
};

// The text before `hold` outside the spans.
std::string content_of(std::string_view text, const Scan& scan) {
  std::string content;
  size_t at = 0;
  for (const Span& span : scan.spans) {
    content.append(text.substr(at, span.begin - at));
    at = span.end;
  }
  if (scan.hold > at) content.append(text.substr(at, scan.hold - at));
  return content;
}

constexpr std::array<std::pair<std::string_view, ToolCallFormat>, 7> kParserNames = {{
    {"qwen25", ToolCallFormat::kHermes},
    {"qwen", ToolCallFormat::kHermes},
    {"qwen3", ToolCallFormat::kHermes},
    {"hermes", ToolCallFormat::kHermes},
    {"llama3", ToolCallFormat::kLlama3},
    {"llama3_json", ToolCallFormat::kLlama3},
    {"mistral", ToolCallFormat::kMistral},
}};

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  for (const auto& [known, format] : kParserNames)
    if (known == name) return format;
  return std::nullopt;
}

std::string tool_call_parser_names() {
  std::string names;
  for (const auto& entry : kParserNames) {
    if (!names.empty()) names += ", ";
    names += entry.first;
  }
  return names;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return "none";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3:
      return "llama3";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kJsonArray:
      return "json_array";
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view chat_template) {
  if (chat_template.find(kHermesOpen) != npos) return ToolCallFormat::kHermes;
  if (chat_template.find(kMistralTag) != npos) return ToolCallFormat::kMistral;
  if (chat_template.find(kPythonTag) != npos) return ToolCallFormat::kLlama3;
  return ToolCallFormat::kNone;
}

ParsedToolCalls parse_tool_calls(const ToolCallSyntax& syntax, std::string_view text) {
  const Scan scan = Scanner(syntax, text, /*final=*/true).run();
  ParsedToolCalls out;
  out.content = content_of(text, scan);
  for (const Span& span : scan.spans)
    for (const ToolCall& call : span.calls) out.calls.push_back(call);
  return out;
}

ParsedToolCalls ToolCallStream::advance(bool final) {
  const Scan scan = Scanner(syntax_, text_, final).run();
  ParsedToolCalls out;
  const std::string content = content_of(text_, scan);
  // Content only grows by what the scan decided; earlier text is never taken back.
  if (content.size() > content_sent_) {
    out.content = content.substr(content_sent_);
    content_sent_ = content.size();
  }
  size_t index = 0;
  for (const Span& span : scan.spans) {
    for (const ToolCall& call : span.calls) {
      if (index++ >= calls_sent_) out.calls.push_back(call);
    }
  }
  calls_sent_ = std::max(calls_sent_, index);
  return out;
}

ParsedToolCalls ToolCallStream::push(std::string_view delta) {
  text_.append(delta);
  return advance(false);
}

ParsedToolCalls ToolCallStream::finish() { return advance(true); }

}  // namespace serve8
