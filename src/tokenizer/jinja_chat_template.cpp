#include "tokenizer/jinja_chat_template.h"

namespace serve8 {

namespace jinja {

std::vector<ChatSegment> to_segments(const TaintedString& rendered) {
  std::vector<ChatSegment> segments;
  const std::string& text = rendered.text();
  std::size_t pos = 0;
  const auto add = [&](std::size_t end, bool trusted) {
    if (end > pos) segments.push_back(ChatSegment{.text = text.substr(pos, end - pos), .trusted = trusted});
    pos = end;
  };
  for (const ByteSpan& span : rendered.untrusted()) {
    add(span.begin, true);
    add(span.end, false);
  }
  add(text.size(), true);
  return segments;
}

}  // namespace jinja

using jinja::Dict;
using jinja::Value;

JinjaChatTemplate::JinjaChatTemplate(std::string_view source,
                                     const std::vector<std::pair<std::string, std::string>>& special_tokens)
    : source_(source), template_(source) {
  for (const auto& [name, token] : special_tokens) special_tokens_.set(Value::string(name), Value::string(token));
}

namespace {

// apply_chat_template drops message fields whose value is None (OpenAI clients send
// "content": null beside tool_calls), because templates test for a missing key, not for None.
Value drop_none_fields(const Value& messages) {
  if (!messages.is_list()) return messages;
  std::vector<Value> out;
  for (const Value& m : messages.as_list().items) {
    if (!m.is_dict()) {
      out.push_back(m);
      continue;
    }
    Dict kept;
    for (const auto& [key, value] : m.as_dict().items) {
      if (!value.is_none()) kept.items.emplace_back(key, value);
    }
    out.push_back(Value::dict(std::move(kept)));
  }
  return Value::list(std::move(out));
}

}  // namespace

jinja::TaintedString JinjaChatTemplate::render_values(const Value& messages, const Value& tools,
                                                      bool add_generation_prompt, const Dict& extra) const {
  // The variables HF's render_jinja_template passes: tools and documents are always defined (None
  // when absent), then the special tokens and the caller's extras.
  Dict context;
  context.set(Value::string("messages"), jinja::mark_untrusted(drop_none_fields(messages)));
  context.set(Value::string("tools"), tools.is_undefined() ? Value::none() : jinja::mark_untrusted(tools));
  context.set(Value::string("documents"), Value::none());
  context.set(Value::string("add_generation_prompt"), Value::boolean(add_generation_prompt));
  for (const auto& [key, value] : special_tokens_.items) context.set(key, value);
  for (const auto& [key, value] : extra.items) context.set(key, value);
  return template_.render(context);
}

std::vector<ChatSegment> JinjaChatTemplate::render(const std::vector<ChatMessage>& messages,
                                                   bool add_generation_prompt) const {
  std::vector<Value> list;
  for (const ChatMessage& m : messages) {
    Dict message;
    message.set(Value::string("role"), Value::string(m.role));
    message.set(Value::string("content"), Value::string(m.content));
    list.push_back(Value::dict(std::move(message)));
  }
  return jinja::to_segments(render_values(Value::list(std::move(list)), Value::none(), add_generation_prompt));
}

}  // namespace serve8
