// Fuzzes request bodies into SamplingParams the way the routes do: parse_json_object, then the
// OpenAI completions and chat sampling fields and SGLang's sampling_params (an object, or a list
// of them), then SamplingParams::validate. A bad request must be an ApiError (the route turns it
// into a 400); any other exception, or a sanitizer report, is a finding.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "server/json_params.h"

namespace {

template <typename F>
void expect_api_errors_only(F&& f) {
  try {
    f();
  } catch (const serve8::ApiError& e) {
    (void)serve8::error_body(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  serve8::Json body;
  try {
    body = serve8::parse_json_object(text);
  } catch (const serve8::ApiError& e) {
    (void)serve8::error_body(e);
    return 0;
  }
  (void)serve8::dump_json(body);
  for (const bool chat : {false, true}) {
    expect_api_errors_only([&] {
      serve8::SamplingParams p;
      bool given = false;
      serve8::parse_openai_sampling_params(body, chat, p, given);
      (void)p.validate(32000);
    });
  }
  expect_api_errors_only([&] {
    const serve8::Json sp = body.value("sampling_params", serve8::Json());
    const size_t n = sp.is_array() ? sp.size() : 1;
    for (size_t i = 0; i < n; ++i) {
      serve8::SamplingParams p;
      bool given = false;
      serve8::parse_sglang_sampling_params(sp.is_array() ? sp[i] : sp, "sampling_params", p, given);
      (void)p.validate(32000);
    }
  });
  expect_api_errors_only([&] {
    if (const auto it = body.find("input_ids"); it != body.end() && serve8::is_token_list(*it))
      (void)serve8::read_token_ids(*it, "input_ids");
  });
  return 0;
}
