#include "tools/tensor_names.h"

#include <vector>

namespace qpu::tools {

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::Layer: return "layer";
    case TensorRole::Embedding: return "embedding";
    case TensorRole::LmHead: return "lm_head";
    case TensorRole::Other: return "other";
  }
  return "?";
}

std::string TensorName::layer_id() const { return layer ? stack + "." + std::to_string(*layer) : std::string(); }

namespace {

bool all_digits(std::string_view s) {
  if (s.empty() || s.size() > 9) return false;  // 9 digits always fit int64
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

}  // namespace

TensorName parse_tensor_name(std::string_view name) {
  TensorName out;
  out.kind = std::string(name);
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    if (!all_digits(parts[i])) continue;
    std::string stack(parts[0]);
    for (size_t j = 1; j < i; ++j) (stack += '.') += parts[j];
    std::string kind(parts[i + 1]);
    for (size_t j = i + 2; j < parts.size(); ++j) (kind += '.') += parts[j];
    out.stack = std::move(stack);
    out.layer = std::stoll(std::string(parts[i]));
    out.kind = std::move(kind);
    out.role = TensorRole::Layer;
    return out;
  }
  if (contains(name, "embed_tokens") || contains(name, "tok_embeddings") || contains(name, "word_embeddings") ||
      contains(name, "wte.")) {
    out.role = TensorRole::Embedding;
  } else if (name.starts_with("lm_head") || name == "output.weight") {
    out.role = TensorRole::LmHead;
  }
  return out;
}

}  // namespace qpu::tools
