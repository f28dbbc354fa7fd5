#include "io/qwen35_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace qpu::io {

namespace {

using nlohmann::json;

constexpr const char* kCausalLM = "Qwen3_5ForCausalLM";
constexpr const char* kConditionalGeneration = "Qwen3_5ForConditionalGeneration";
constexpr const char* kTextModelType = "qwen3_5_text";
constexpr const char* kWrapperModelType = "qwen3_5";

// Far above any real model, low enough that products of two sizes (vocab x hidden)
// cannot overflow int64 anywhere downstream.
constexpr int64_t kMaxSize = int64_t{1} << 26;

// Reads fields of one JSON object, naming `where` ("config.json" or
// "config.json: text_config") in every error.
class Fields {
 public:
  Fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  const std::string& where() const { return where_; }
  const json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  bool has_non_null(const char* key) const {
    const json* value = find(key);
    return value != nullptr && !value->is_null();
  }

  int64_t integer(const char* key, int64_t fallback) const {
    const json* value = find(key);
    if (value == nullptr) return fallback;
    return as_integer(*value, key);
  }
  int64_t as_integer(const json& value, const std::string& key) const {
    if (value.is_number_unsigned()) {
      if (value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail("{}: {} is out of range", where_, key);
      return static_cast<int64_t>(value.get<uint64_t>());
    }
    if (value.is_number_integer()) return value.get<int64_t>();
    fail("{}: {} must be an integer, got {}", where_, key, value.dump());
  }
  int64_t size(const char* key, int64_t fallback) const {
    const int64_t v = integer(key, fallback);
    if (v <= 0 || v > kMaxSize) fail("{}: {} must be in [1, {}], got {}", where_, key, kMaxSize, v);
    return v;
  }
  double number(const char* key, double fallback) const {
    const json* value = find(key);
    if (value == nullptr) return fallback;
    if (!value->is_number()) fail("{}: {} must be a number, got {}", where_, key, value->dump());
    return value->get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    const json* value = find(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail("{}: {} must be true or false, got {}", where_, key, value->dump());
    return value->get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    const json* value = find(key);
    if (value == nullptr) return fallback;
    if (!value->is_string()) fail("{}: {} must be a string, got {}", where_, key, value->dump());
    return value->get<std::string>();
  }
  std::optional<int64_t> token(const char* key) const {
    const json* value = find(key);
    if (value == nullptr || value->is_null()) return std::nullopt;
    const int64_t id = as_integer(*value, key);
    if (id < 0) fail("{}: {} must not be negative, got {}", where_, key, id);
    return id;
  }
  std::vector<int64_t> tokens(const char* key) const {
    const json* value = find(key);
    if (value == nullptr || value->is_null()) return {};
    if (!value->is_array()) return {*token(key)};
    std::vector<int64_t> ids;
    for (const auto& item : *value) {
      const int64_t id = as_integer(item, key);
      if (id < 0) fail("{}: {} must not contain negative ids, got {}", where_, key, id);
      ids.push_back(id);
    }
    return ids;
  }

 private:
  const json& object_;
  std::string where_;
};

std::optional<LayerType> parse_layer_type(const std::string& name) {
  if (name == "linear_attention") return LayerType::LinearAttention;
  if (name == "full_attention") return LayerType::FullAttention;
  return std::nullopt;
}

// transformers' RotaryEmbeddingConfigMixin: rope_scaling (legacy name) wins over
// rope_parameters; inside, rope_theta / partial_rotary_factor win over top-level
// keys, which win over the defaults. A dict keyed by layer type holds one set per
// type; only full-attention layers use RoPE here.
void parse_rope(const Fields& text, Qwen35Config& config) {
  const json* rope = nullptr;
  std::string rope_key;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const json* candidate = text.find(key);
    if (candidate == nullptr || candidate->is_null() || (candidate->is_object() && candidate->empty())) continue;
    if (!candidate->is_object()) fail("{}: {} must be an object, got {}", text.where(), key, candidate->dump());
    rope = candidate;
    rope_key = key;
    break;
  }
  double theta = text.number("rope_theta", 10000.0);
  double factor = text.number("partial_rotary_factor", 0.25);
  if (rope != nullptr) {
    if (rope->contains("full_attention") || rope->contains("linear_attention")) {
      rope_key += ".full_attention";
      const auto it = rope->find("full_attention");
      if (it == rope->end() || !it->is_object())
        fail("{}: {} has per-layer-type entries but no full_attention object", text.where(), rope_key);
      rope = &*it;
    }
    const Fields params(*rope, text.where() + ": " + rope_key);
    theta = params.number("rope_theta", theta);
    factor = params.number("partial_rotary_factor", factor);
    const std::string type = params.string("rope_type", params.string("type", "default"));
    if (type != "default") fail("{}: rope_type '{}' is not supported (only 'default')", params.where(), type);
  }
  if (!(theta > 0) || !std::isfinite(theta)) fail("{}: rope_theta must be positive, got {}", text.where(), theta);
  if (!(factor > 0 && factor <= 1)) fail("{}: partial_rotary_factor must be in (0, 1], got {}", text.where(), factor);
  config.rope_theta = theta;
  config.partial_rotary_factor = factor;
}

void parse_layer_types(const Fields& text, Qwen35Config& config) {
  const json* explicit_types = text.find("layer_types");
  if (explicit_types != nullptr && !explicit_types->is_null()) {
    if (!explicit_types->is_array()) fail("{}: layer_types must be an array", text.where());
    if (static_cast<int64_t>(explicit_types->size()) != config.num_hidden_layers)
      fail("{}: layer_types has {} entries but num_hidden_layers is {}", text.where(), explicit_types->size(),
           config.num_hidden_layers);
    for (size_t i = 0; i < explicit_types->size(); ++i) {
      const json& item = (*explicit_types)[i];
      const auto type = item.is_string() ? parse_layer_type(item.get<std::string>()) : std::nullopt;
      if (!type) fail("{}: layer_types[{}] is {}, expected \"linear_attention\" or \"full_attention\"", text.where(), i, item.dump());
      config.layer_types.push_back(*type);
    }
    return;
  }
  const int64_t interval = text.size("full_attention_interval", 4);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i)
    config.layer_types.push_back((i + 1) % interval != 0 ? LayerType::LinearAttention : LayerType::FullAttention);
}

void validate(const Qwen35Config& c, const std::string& where) {
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where, c.num_attention_heads,
         c.num_key_value_heads);
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    fail("{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", where, c.linear_num_value_heads,
         c.linear_num_key_heads);
  const int64_t rotary = c.rotary_dim();
  if (rotary <= 0 || rotary % 2 != 0 || rotary > c.head_dim)
    fail("{}: rotary dim int(head_dim {} * partial_rotary_factor {}) = {} must be even and in [2, head_dim]", where,
         c.head_dim, c.partial_rotary_factor, rotary);
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    fail("{}: rms_norm_eps must be positive, got {}", where, c.rms_norm_eps);
}

}  // namespace

const char* layer_type_name(LayerType type) {
  return type == LayerType::LinearAttention ? "linear_attention" : "full_attention";
}

int64_t Qwen35Config::rotary_dim() const {
  // Python's int(): truncation of the double product.
  return static_cast<int64_t>(std::trunc(static_cast<double>(head_dim) * partial_rotary_factor));
}
int64_t Qwen35Config::linear_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
int64_t Qwen35Config::linear_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
int64_t Qwen35Config::linear_conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }

Qwen35Config parse_qwen35_config(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) fail("{}: not a JSON object", source);
  const Fields top(json, source);
  Qwen35Config config;
  config.model_type = top.string("model_type", "");

  std::string architecture;
  if (const auto* archs = top.find("architectures"); archs != nullptr && !archs->is_null()) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string())
      fail("{}: architectures must be a non-empty list of strings", source);
    architecture = (*archs)[0].get<std::string>();
  } else if (config.model_type == kTextModelType) {
    architecture = kCausalLM;
  } else if (config.model_type == kWrapperModelType) {
    architecture = kConditionalGeneration;
  } else {
    fail("{}: no architectures and model_type '{}' is not {} or {}", source, config.model_type, kTextModelType,
         kWrapperModelType);
  }
  const bool wrapper = architecture == kConditionalGeneration;
  if (!wrapper && architecture != kCausalLM)
    fail("{}: architecture '{}' is not supported (expected {} or {})", source, architecture, kCausalLM,
         kConditionalGeneration);
  const char* expected_type = wrapper ? kWrapperModelType : kTextModelType;
  if (!config.model_type.empty() && config.model_type != expected_type)
    fail("{}: model_type '{}' does not match architecture {} (expected '{}')", source, config.model_type, architecture,
         expected_type);
  config.architecture = architecture;
  config.tensor_prefix = wrapper ? "model.language_model." : "model.";

  const nlohmann::json* text_json = &json;
  if (wrapper) {
    text_json = top.find("text_config");
    if (text_json == nullptr || !text_json->is_object()) fail("{}: {} needs a text_config object", source, architecture);
  }
  const Fields text(*text_json, wrapper ? source + ": text_config" : source);
  if (wrapper) {
    const std::string text_type = text.string("model_type", kTextModelType);
    if (text_type != kTextModelType) fail("{}: model_type '{}' is not '{}'", text.where(), text_type, kTextModelType);
  }

  // Defaults: transformers 5.24.0 Qwen3_5TextConfig.
  config.vocab_size = text.size("vocab_size", 248320);
  config.hidden_size = text.size("hidden_size", 4096);
  config.intermediate_size = text.size("intermediate_size", 12288);
  config.num_hidden_layers = text.size("num_hidden_layers", 32);
  config.num_attention_heads = text.size("num_attention_heads", 16);
  config.num_key_value_heads = text.size("num_key_value_heads", 4);
  config.head_dim = text.size("head_dim", 256);
  config.linear_conv_kernel_dim = text.size("linear_conv_kernel_dim", 4);
  config.linear_key_head_dim = text.size("linear_key_head_dim", 128);
  config.linear_value_head_dim = text.size("linear_value_head_dim", 128);
  config.linear_num_key_heads = text.size("linear_num_key_heads", 16);
  config.linear_num_value_heads = text.size("linear_num_value_heads", 32);
  config.max_position_embeddings = text.size("max_position_embeddings", 32768);
  config.rms_norm_eps = text.number("rms_norm_eps", 1e-6);
  // The wrapper's own flag decides tying (transformers reads model.config, the top level).
  config.tie_word_embeddings = (wrapper ? top : text).boolean("tie_word_embeddings", false);

  // The engine implements exactly one activation and bias-free projections.
  if (const std::string act = text.string("hidden_act", "silu"); act != "silu")
    fail("{}: hidden_act '{}' is not supported (only 'silu')", text.where(), act);
  if (text.boolean("attention_bias", false)) fail("{}: attention_bias true is not supported", text.where());

  parse_rope(text, config);
  parse_layer_types(text, config);

  // Token ids as GenerationConfig.from_model_config picks them: the wrapper's own
  // value when set, else the text config's.
  const auto ids_from = [&](const char* key) -> const Fields& {
    return wrapper && top.has_non_null(key) ? top : text;
  };
  config.eos_token_ids = ids_from("eos_token_id").tokens("eos_token_id");
  if (!config.eos_token_ids.empty()) config.eos_token_id = config.eos_token_ids.front();
  config.bos_token_id = ids_from("bos_token_id").token("bos_token_id");

  validate(config, text.where());
  return config;
}

Qwen35Config load_qwen35_config(const std::filesystem::path& checkpoint_dir) {
  const auto path = checkpoint_dir / "config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  const auto json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) fail("{}: not valid JSON", path.string());
  return parse_qwen35_config(json, path.string());
}

}  // namespace qpu::io
