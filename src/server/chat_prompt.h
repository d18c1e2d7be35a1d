// The prompt of a chat request: its messages (chat's, or the Responses API's input turned into
// messages) checked and shaped as chat templates expect them, then rendered with the tools into
// token ids. Message text stays request text: special-token spellings in it never become ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/chat_tools.h"

namespace serve8 {

struct ServerContext;

// Chat's `messages`: roles, contents (a string or text parts, joined), an assistant's
// `tool_calls` (their JSON-string arguments parsed into objects, as SGLang and vLLM hand them to
// templates) and a tool message's `tool_call_id`; any other field passes through.
Json chat_messages(const Json& body);
// The Responses API's `instructions` and `input` (a string, or message, function_call and
// function_call_output items) as chat messages.
Json response_input_messages(const Json& body);

// The prompt's ids. A Jinja template gets the messages with all their fields and the tools; the
// built-in Llama-2 format takes role and content only and refuses tools and tool messages (400).
// `param` names the messages field in errors.
std::vector<int32_t> encode_chat_prompt(const ServerContext& ctx, const Json& messages, const ToolsRequest& tools,
                                        const std::string& param);

}  // namespace serve8
