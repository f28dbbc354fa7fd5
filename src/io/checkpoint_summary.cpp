#include "io/checkpoint_summary.h"

#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/checkpoint.h"
#include "io/qwen35_weights.h"

namespace qpu::io {

namespace {

struct Classified {
  std::string group;
  std::string kind;
};

Classified classify(const std::string& name, const Qwen35Config& c) {
  if (name.starts_with("mtp.")) return {"mtp (ignored)", "mtp"};
  if (name.starts_with("model.visual.")) return {"visual (ignored)", "visual"};
  if (name == "lm_head.weight") return {"lm_head", name};
  const std::string& p = c.tensor_prefix;
  if (!name.starts_with(p)) return {"other", name};
  const std::string rest = name.substr(p.size());
  if (rest == "embed_tokens.weight") return {"embedding", rest};
  if (rest == "norm.weight") return {"final norm", rest};
  if (rest.starts_with("layers.")) {
    const char* first = rest.data() + 7;
    const char* last = rest.data() + rest.size();
    size_t layer = 0;
    const auto [end, ec] = std::from_chars(first, last, layer);
    if (ec == std::errc() && end != last && *end == '.' && layer < c.layer_types.size())
      return {fmt::format("{} layers", layer_type_name(c.layer_types[layer])), std::string(end + 1, last)};
  }
  return {"other", rest};
}

void add(CheckpointSummary::Count& count, const TensorInfo& t) {
  count.tensors += 1;
  count.parameters += t.numel();
  count.bytes += t.nbytes();
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, units[unit]);
}

nlohmann::json count_json(const CheckpointSummary::Count& c) {
  return {{"tensors", c.tensors}, {"parameters", c.parameters}, {"bytes", c.bytes}};
}

}  // namespace

std::string describe_layer_pattern(const std::vector<LayerType>& types) {
  const size_t n = types.size();
  auto runs = [&](size_t length) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < length;) {
      size_t j = i;
      while (j < length && types[j] == types[i]) ++j;
      parts.push_back(fmt::format("{}×{}", j - i, layer_type_name(types[i])));
      i = j;
    }
    return fmt::format("{}", fmt::join(parts, ", "));
  };
  for (size_t period = 1; period < n; ++period) {
    if (n % period != 0) continue;
    bool repeats = true;
    for (size_t i = period; i < n && repeats; ++i) repeats = types[i] == types[i % period];
    if (repeats) return fmt::format("({}) ×{}", runs(period), n / period);
  }
  return runs(n);
}

CheckpointSummary summarize_checkpoint(const std::filesystem::path& dir) {
  CheckpointSummary s;
  s.dir = dir;
  s.config = load_qwen35_config(dir);
  const Checkpoint checkpoint(dir);
  s.sharded = checkpoint.sharded();
  try {
    check_qwen35_tensors(checkpoint, s.config);
  } catch (const Error& e) {
    s.check = e.what();
  }
  // Use the prefix the tensors actually carry, when one of the two is present.
  if (!checkpoint.find(s.config.tensor_prefix + "embed_tokens.weight")) {
    for (const char* p : {"model.", "model.language_model."}) {
      if (checkpoint.find(std::string(p) + "embed_tokens.weight")) s.config.tensor_prefix = p;
    }
  }
  for (const auto& file : checkpoint.files()) {
    s.files.push_back({file->path().filename().string(), file->file_size(), file->tensors().size()});
    s.bytes_on_disk += file->file_size();
  }
  for (const auto& [name, entry] : checkpoint.tensors()) {
    const auto [group, kind] = classify(name, s.config);
    add(s.by_group[group], *entry.tensor);
    add(s.by_kind[kind], *entry.tensor);
    add(s.by_dtype[dtype_name(entry.tensor->dtype)], *entry.tensor);
    add(s.total, *entry.tensor);
  }
  return s;
}

std::string format_summary(const CheckpointSummary& s) {
  const Qwen35Config& c = s.config;
  std::string out;
  auto line = [&](std::string text) {
    out += text;
    out += '\n';
  };
  line(fmt::format("checkpoint     {}", s.dir.string()));
  line(fmt::format("architecture   {} (model_type {}), tensor prefix '{}'", c.architecture, c.model_type, c.tensor_prefix));
  line(fmt::format("sizes          vocab {}, hidden {}, intermediate {}, {} layers", c.vocab_size, c.hidden_size,
                   c.intermediate_size, c.num_hidden_layers));
  line(fmt::format("layers         {}", describe_layer_pattern(c.layer_types)));
  line(fmt::format("attention      {} heads, {} kv heads, head_dim {}, rotary dim {} (theta {}, factor {})",
                   c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim(), c.rope_theta,
                   c.partial_rotary_factor));
  line(fmt::format("gated deltanet {} key heads × {}, {} value heads × {}, conv kernel {} (conv dim {})",
                   c.linear_num_key_heads, c.linear_key_head_dim, c.linear_num_value_heads, c.linear_value_head_dim,
                   c.linear_conv_kernel_dim, c.linear_conv_dim()));
  line(fmt::format("other          rms_norm_eps {}, tie_word_embeddings {}, bos {}, eos [{}]", c.rms_norm_eps,
                   c.tie_word_embeddings, c.bos_token_id ? std::to_string(*c.bos_token_id) : "none",
                   fmt::join(c.eos_token_ids, ", ")));
  line(fmt::format("tensors        {} tensors, {} parameters, {}", s.total.tensors, s.total.parameters,
                   human_bytes(s.total.bytes)));
  line(fmt::format("check          {}", s.check.empty() ? "every tensor matches the config" : "FAILED: " + s.check));
  line("");
  line("parameters by group:");
  for (const auto& [group, count] : s.by_group)
    line(fmt::format("  {:<26} {:>14} params {:>6} tensors", group, count.parameters, count.tensors));
  line("parameters by tensor kind:");
  for (const auto& [kind, count] : s.by_kind)
    line(fmt::format("  {:<40} {:>14} params {:>6} tensors", kind, count.parameters, count.tensors));
  line("dtypes:");
  for (const auto& [dtype, count] : s.by_dtype)
    line(fmt::format("  {:<8} {:>6} tensors {:>14} bytes ({})", dtype, count.tensors, count.bytes, human_bytes(count.bytes)));
  line(fmt::format("files ({}, {} on disk):", s.sharded ? "sharded with index" : "single file", human_bytes(s.bytes_on_disk)));
  for (const auto& f : s.files) line(fmt::format("  {:<40} {:>14} bytes {:>6} tensors", f.name, f.bytes, f.tensors));
  return out;
}

nlohmann::json summary_to_json(const CheckpointSummary& s) {
  const Qwen35Config& c = s.config;
  nlohmann::json j;
  j["checkpoint"] = s.dir.string();
  std::vector<std::string> types;
  for (LayerType t : c.layer_types) types.emplace_back(layer_type_name(t));
  j["config"] = {{"architecture", c.architecture},
                 {"model_type", c.model_type},
                 {"tensor_prefix", c.tensor_prefix},
                 {"vocab_size", c.vocab_size},
                 {"hidden_size", c.hidden_size},
                 {"intermediate_size", c.intermediate_size},
                 {"num_hidden_layers", c.num_hidden_layers},
                 {"num_attention_heads", c.num_attention_heads},
                 {"num_key_value_heads", c.num_key_value_heads},
                 {"head_dim", c.head_dim},
                 {"rotary_dim", c.rotary_dim()},
                 {"rope_theta", c.rope_theta},
                 {"partial_rotary_factor", c.partial_rotary_factor},
                 {"linear_num_key_heads", c.linear_num_key_heads},
                 {"linear_num_value_heads", c.linear_num_value_heads},
                 {"linear_key_head_dim", c.linear_key_head_dim},
                 {"linear_value_head_dim", c.linear_value_head_dim},
                 {"linear_conv_kernel_dim", c.linear_conv_kernel_dim},
                 {"rms_norm_eps", c.rms_norm_eps},
                 {"tie_word_embeddings", c.tie_word_embeddings},
                 {"bos_token_id", c.bos_token_id ? nlohmann::json(*c.bos_token_id) : nlohmann::json()},
                 {"eos_token_ids", c.eos_token_ids},
                 {"layer_types", types},
                 {"layer_pattern", describe_layer_pattern(c.layer_types)}};
  for (const auto& [k, v] : s.by_group) j["by_group"][k] = count_json(v);
  for (const auto& [k, v] : s.by_kind) j["by_kind"][k] = count_json(v);
  for (const auto& [k, v] : s.by_dtype) j["by_dtype"][k] = count_json(v);
  j["total"] = count_json(s.total);
  j["sharded"] = s.sharded;
  j["bytes_on_disk"] = s.bytes_on_disk;
  j["files"] = nlohmann::json::array();
  for (const auto& f : s.files) j["files"].push_back({{"name", f.name}, {"bytes", f.bytes}, {"tensors", f.tensors}});
  j["check"] = s.check.empty() ? nlohmann::json("ok") : nlohmann::json(s.check);
  return j;
}

}  // namespace qpu::io
