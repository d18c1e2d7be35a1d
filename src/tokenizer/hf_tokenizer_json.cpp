#include "tokenizer/hf_tokenizer_json.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/hf_config.h"

namespace serve8 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Reads one tokenizer.json; `path_` prefixes every message, `where` names the field.
class JsonReader {
 public:
  explicit JsonReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void error(const std::string& where, const std::string& what) const {
    fail("'{}': {}: {}", path_, where, what);
  }

  const json& member(const json& object, const char* key, const std::string& where) const {
    const auto it = object.find(key);
    if (it == object.end()) error(where, fmt::format("'{}' is missing", key));
    return *it;
  }

  bool flag(const json& object, const char* key, bool fallback, const std::string& where) const {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) error(where + "." + key, "expected true or false");
    return it->get<bool>();
  }

  std::string type_of(const json& object, const std::string& where) const {
    if (!object.is_object()) error(where, "expected an object");
    const json& type = member(object, "type", where);
    if (!type.is_string()) error(where + ".type", "expected a string");
    return type.get<std::string>();
  }

  std::unique_ptr<BpeModel> model(const json& root) const {
    const json& model = member(root, "model", "the file");
    if (!model.is_object()) error("model", "expected an object");
    // Old files leave out the type of a BPE model; the merges say what it is.
    const std::string type = model.contains("type") ? type_of(model, "model") : "BPE";
    if (type != "BPE") error("model.type", fmt::format("'{}' is not supported (only BPE)", type));
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const auto it = model.find(key);
      if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
        error(fmt::format("model.{}", key), "a non-empty value is not supported (byte-level BPE uses none)");
      }
    }
    if (const auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
      if (!it->is_number() || it->get<double>() != 0.0) error("model.dropout", "BPE dropout is not supported");
    }

    const json& vocab_json = member(model, "vocab", "model");
    if (!vocab_json.is_object()) error("model.vocab", "expected an object of token: id");
    TokenIds vocab;
    vocab.reserve(vocab_json.size());
    for (const auto& [token, id] : vocab_json.items()) {
      if (!id.is_number_integer()) error("model.vocab", fmt::format("the id of '{}' is not an integer", token));
      vocab.emplace(token, id.get<int32_t>());
    }

    const json& merges_json = member(model, "merges", "model");
    if (!merges_json.is_array()) error("model.merges", "expected an array");
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merges_json.size());
    for (std::size_t i = 0; i < merges_json.size(); ++i) {
      const json& m = merges_json[i];
      // Two spellings: "a b" (older files) or ["a", "b"] (tokenizers 0.20 on).
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const auto space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
          error(fmt::format("model.merges[{}]", i), fmt::format("'{}' is not two tokens separated by one space", s));
        }
        merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        error(fmt::format("model.merges[{}]", i), "expected \"a b\" or [\"a\", \"b\"]");
      }
    }

    BpeOptions options;
    options.ignore_merges = flag(model, "ignore_merges", false, "model");
    options.byte_fallback = flag(model, "byte_fallback", false, "model");
    options.fuse_unk = flag(model, "fuse_unk", false, "model");
    if (const auto it = model.find("unk_token"); it != model.end() && it->is_string()) {
      const auto unk = vocab.find(it->get<std::string>());
      if (unk == vocab.end())
        error("model.unk_token", fmt::format("'{}' is not in the vocabulary", it->get<std::string>()));
      options.unk_id = unk->second;
    }
    return std::make_unique<BpeModel>(std::move(vocab), merges, options, fmt::format("'{}': model", path_));
  }

  std::vector<AddedToken> added_tokens(const json& root) const {
    std::vector<AddedToken> tokens;
    const auto it = root.find("added_tokens");
    if (it == root.end() || it->is_null()) return tokens;
    if (!it->is_array()) error("added_tokens", "expected an array");
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      const std::string where = fmt::format("added_tokens[{}]", i);
      if (!t.is_object()) error(where, "expected an object");
      const json& id = member(t, "id", where);
      const json& content = member(t, "content", where);
      if (!id.is_number_integer()) error(where + ".id", "expected an integer");
      if (!content.is_string()) error(where + ".content", "expected a string");
      AddedToken token;
      token.id = id.get<int32_t>();
      token.content = content.get<std::string>();
      token.special = flag(t, "special", false, where);
      token.lstrip = flag(t, "lstrip", false, where);
      token.rstrip = flag(t, "rstrip", false, where);
      token.single_word = flag(t, "single_word", false, where);
      token.normalized = flag(t, "normalized", !token.special, where);
      tokens.push_back(std::move(token));
    }
    return tokens;
  }

  Normalization normalizer(const json& n, const std::string& where) const {
    if (n.is_null()) return Normalization::kNone;
    const std::string type = type_of(n, where);
    if (type == "NFC") return Normalization::kNfc;
    if (type == "Sequence") {
      const json& steps = member(n, "normalizers", where);
      if (!steps.is_array()) error(where + ".normalizers", "expected an array");
      Normalization result = Normalization::kNone;
      for (std::size_t i = 0; i < steps.size(); ++i) {
        if (normalizer(steps[i], fmt::format("{}.normalizers[{}]", where, i)) == Normalization::kNfc) {
          result = Normalization::kNfc;  // NFC is idempotent, so NFC twice is NFC
        }
      }
      return result;
    }
    error(where, fmt::format("type '{}' is not supported (supported: NFC, Sequence of NFC, or null)", type));
  }

  std::unique_ptr<PreTokenizer> pre_tokenizer(const json& p, const std::string& where) const {
    if (p.is_null()) return nullptr;
    const std::string type = type_of(p, where);
    if (type == "ByteLevel") {
      // HF's defaults for fields a file leaves out.
      return std::make_unique<ByteLevelPreTokenizer>(flag(p, "add_prefix_space", true, where),
                                                     flag(p, "use_regex", true, where));
    }
    if (type == "Digits") return make_digits_pre_tokenizer(flag(p, "individual_digits", false, where));
    if (type == "Split") return split(p, where);
    if (type == "Sequence") {
      const json& steps = member(p, "pretokenizers", where);
      if (!steps.is_array()) error(where + ".pretokenizers", "expected an array");
      std::vector<std::unique_ptr<PreTokenizer>> parsed;
      for (std::size_t i = 0; i < steps.size(); ++i) {
        auto step = pre_tokenizer(steps[i], fmt::format("{}.pretokenizers[{}]", where, i));
        if (step) parsed.push_back(std::move(step));
      }
      return std::make_unique<SequencePreTokenizer>(std::move(parsed));
    }
    error(where, fmt::format("type '{}' is not supported (supported: ByteLevel, Split, Digits, Sequence)", type));
  }

  std::unique_ptr<PreTokenizer> split(const json& p, const std::string& where) const {
    const json& behavior_json = member(p, "behavior", where);
    if (!behavior_json.is_string()) error(where + ".behavior", "expected a string");
    const std::string name = behavior_json.get<std::string>();
    SplitBehavior behavior = SplitBehavior::kIsolated;
    if (name == "Removed") {
      behavior = SplitBehavior::kRemoved;
    } else if (name == "Isolated") {
      behavior = SplitBehavior::kIsolated;
    } else if (name == "MergedWithPrevious") {
      behavior = SplitBehavior::kMergedWithPrevious;
    } else if (name == "MergedWithNext") {
      behavior = SplitBehavior::kMergedWithNext;
    } else if (name == "Contiguous") {
      behavior = SplitBehavior::kContiguous;
    } else {
      error(where + ".behavior", fmt::format("'{}' is not one of Removed, Isolated, MergedWithPrevious, "
                                             "MergedWithNext, Contiguous",
                                             name));
    }
    const bool invert = flag(p, "invert", false, where);
    const json& pattern = member(p, "pattern", where);
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      try {
        return SplitPreTokenizer::regex(pattern["Regex"].get<std::string>(), behavior, invert);
      } catch (const Error& e) {
        error(where + ".pattern", e.what());
      }
    }
    if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      return SplitPreTokenizer::literal(pattern["String"].get<std::string>(), behavior, invert);
    }
    error(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
  }

  // Finds the TemplateProcessing among the post-processors; ByteLevel only trims offsets, which
  // ids do not have.
  void post_processor(const json& p, const std::string& where, BpeTokenizerSpec& spec) const {
    if (p.is_null()) return;
    const std::string type = type_of(p, where);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      const json& steps = member(p, "processors", where);
      if (!steps.is_array()) error(where + ".processors", "expected an array");
      for (std::size_t i = 0; i < steps.size(); ++i) {
        post_processor(steps[i], fmt::format("{}.processors[{}]", where, i), spec);
      }
      return;
    }
    if (type != "TemplateProcessing") {
      error(where,
            fmt::format("type '{}' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)", type));
    }
    if (spec.special_template) error(where, "a second TemplateProcessing is not supported");
    const json& single = member(p, "single", where);
    const json& specials = member(p, "special_tokens", where);
    if (!single.is_array()) error(where + ".single", "expected an array");
    std::pair<std::vector<int32_t>, std::vector<int32_t>> ids;
    bool seen_text = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      const std::string item_where = fmt::format("{}.single[{}]", where, i);
      if (item.contains("Sequence")) {
        if (seen_text) error(item_where, "the text appears twice");
        seen_text = true;
      } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id")) {
        const std::string name = item["SpecialToken"]["id"].get<std::string>();
        const auto entry = specials.find(name);
        if (entry == specials.end() || !entry->contains("ids") || !(*entry)["ids"].is_array()) {
          error(item_where, fmt::format("special token '{}' has no entry with ids in special_tokens", name));
        }
        for (const json& id : (*entry)["ids"]) {
          if (!id.is_number_integer()) error(item_where, fmt::format("special token '{}' has a non-integer id", name));
          (seen_text ? ids.second : ids.first).push_back(id.get<int32_t>());
        }
      } else {
        error(item_where, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    spec.special_template = std::move(ids);
  }

  void decoder(const json& d, const std::string& where) const {
    if (d.is_null()) error(where, "is null; a byte-level BPE tokenizer needs the ByteLevel decoder");
    const std::string type = type_of(d, where);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      const json& steps = member(d, "decoders", where);
      if (!steps.is_array() || steps.size() != 1) error(where, "only a Sequence of one ByteLevel decoder is supported");
      decoder(steps[0], where + ".decoders[0]");
      return;
    }
    error(where, fmt::format("type '{}' is not supported (only ByteLevel)", type));
  }

 private:
  std::string path_;
};

const json& null_json() {
  static const json kNull;
  return kNull;
}

const json& field(const json& root, const char* key) {
  const auto it = root.find(key);
  return it == root.end() ? null_json() : *it;
}

// tokenizer_config.json, chat_template.jinja and generation_config.json beside the file.
void read_configs(const fs::path& dir, BpeTokenizerSpec& spec) {
  if (auto config = read_json_if_present(dir / "tokenizer_config.json")) {
    const std::string name = (dir / "tokenizer_config.json").string();
    for (const auto& [key, target] :
         {std::pair{"add_bos_token", &spec.add_bos_token}, std::pair{"add_eos_token", &spec.add_eos_token}}) {
      const auto it = config->find(key);
      if (it == config->end() || it->is_null()) continue;
      SERVE8_CHECK(it->is_boolean(), "'{}': {} is not true or false", name, key);
      *target = it->get<bool>();
    }
    if (auto text = config_token_text(*config, "bos_token")) spec.bos_token = *text;
    if (auto text = config_token_text(*config, "eos_token")) spec.eos_token = *text;
    if (const auto it = config->find("chat_template"); it != config->end()) {
      if (it->is_string()) {
        spec.chat_template = it->get<std::string>();
      } else if (it->is_array()) {
        // Several named templates: the "default" one is the chat template.
        for (const json& entry : *it) {
          if (entry.value("name", "") == "default" && entry.contains("template") && entry["template"].is_string()) {
            spec.chat_template = entry["template"].get<std::string>();
          }
        }
      } else if (!it->is_null()) {
        fail("'{}': chat_template is neither a string nor a list of {{name, template}}", name);
      }
    }
  }
  // Newer checkpoints keep the template in a file of its own.
  if (spec.chat_template.empty()) {
    const fs::path jinja = dir / "chat_template.jinja";
    std::error_code ec;
    if (fs::is_regular_file(jinja, ec)) {
      std::ifstream in(jinja);
      SERVE8_CHECK(in, "cannot open '{}'", jinja.string());
      std::ostringstream text;
      text << in.rdbuf();
      spec.chat_template = text.str();
    }
  }
  if (auto config = read_json_if_present(dir / "generation_config.json")) spec.extra_eos_ids = config_eos_ids(*config);
}

}  // namespace

bool is_byte_level_tokenizer_json(const json& file) {
  if (!file.is_object()) return false;
  const json& decoder = field(file, "decoder");
  if (!decoder.is_object()) return false;
  if (decoder.value("type", "") == "ByteLevel") return true;
  const json& steps = field(decoder, "decoders");
  return steps.is_array() && steps.size() == 1 && steps[0].is_object() && steps[0].value("type", "") == "ByteLevel";
}

std::unique_ptr<BpeTokenizer> load_hf_bpe_tokenizer(const json& file, const std::string& path) {
  const JsonReader reader(path);
  if (!file.is_object()) reader.error("the file", "expected a JSON object");
  BpeTokenizerSpec spec;
  spec.source = path;
  spec.model = reader.model(file);
  spec.added_tokens = reader.added_tokens(file);
  spec.normalization = reader.normalizer(field(file, "normalizer"), "normalizer");
  spec.pre_tokenizer = reader.pre_tokenizer(field(file, "pre_tokenizer"), "pre_tokenizer");
  reader.post_processor(field(file, "post_processor"), "post_processor", spec);
  reader.decoder(field(file, "decoder"), "decoder");
  const fs::path dir = fs::path(path).parent_path();
  read_configs(dir.empty() ? fs::path(".") : dir, spec);
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

std::unique_ptr<BpeTokenizer> load_hf_bpe_tokenizer(const std::string& path) {
  return load_hf_bpe_tokenizer(read_json(path), path);
}

}  // namespace serve8
