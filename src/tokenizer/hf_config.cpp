#include "tokenizer/hf_config.h"

#include <fstream>

#include "core/error.h"

namespace serve8 {

using nlohmann::json;

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  SERVE8_CHECK(in, "cannot open '{}'", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("cannot parse '{}': {}", path.string(), e.what());
  }
}

std::optional<json> read_json_if_present(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  return read_json(path);
}

std::optional<std::string> config_token_text(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

std::vector<int> config_eos_ids(const json& config) {
  std::vector<int> ids;
  const auto it = config.find("eos_token_id");
  if (it == config.end()) return ids;
  const json list = it->is_array() ? *it : json::array({*it});
  for (const json& v : list) {
    if (v.is_number_integer()) ids.push_back(v.get<int>());
  }
  return ids;
}

}  // namespace serve8
