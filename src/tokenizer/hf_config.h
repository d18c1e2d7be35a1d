// The JSON files HF keeps beside a tokenizer (tokenizer_config.json, generation_config.json) and
// the field shapes they use, read the same way by every tokenizer loader.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace serve8 {

// Parses `path` when it exists; one that is there but unreadable or malformed throws Error
// naming it, rather than being skipped.
std::optional<nlohmann::json> read_json_if_present(const std::filesystem::path& path);
// Parses `path`, which must exist.
nlohmann::json read_json(const std::filesystem::path& path);

// A special token as HF writes it: a string or an AddedToken object {"content": ...}; nullopt
// when the key is absent or null.
std::optional<std::string> config_token_text(const nlohmann::json& config, const char* key);

// generation_config.json's eos_token_id, an int or a list of them; empty when absent.
std::vector<int> config_eos_ids(const nlohmann::json& config);

}  // namespace serve8
