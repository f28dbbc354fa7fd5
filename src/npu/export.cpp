#include "npu/export.h"

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/safetensors_writer.h"

namespace qpu::npu {

void export_checkpoint(const io::Qwen35Weights& w, const std::filesystem::path& dir) {
  const io::Qwen35Config& c = w.config;
  std::filesystem::create_directories(dir);
  nlohmann::json j;
  j["architectures"] = {"Qwen3_5ForCausalLM"};
  j["model_type"] = "qwen3_5_text";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["linear_num_key_heads"] = c.linear_num_key_heads;
  j["linear_num_value_heads"] = c.linear_num_value_heads;
  j["linear_key_head_dim"] = c.linear_key_head_dim;
  j["linear_value_head_dim"] = c.linear_value_head_dim;
  j["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["max_position_embeddings"] = 262144;
  j["attention_bias"] = false;
  j["dtype"] = "float32";
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta},
                          {"partial_rotary_factor", c.partial_rotary_factor}};
  j["partial_rotary_factor"] = c.partial_rotary_factor;
  auto types = nlohmann::json::array();
  for (io::LayerType t : c.layer_types) types.push_back(io::layer_type_name(t));
  j["layer_types"] = types;
  {
    std::ofstream f(dir / "config.json");
    f << j.dump(2);
    if (!f) fail("{}: cannot write", (dir / "config.json").string());
  }

  std::vector<io::TensorToWrite> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
    t.push_back({std::move(name), io::DType::F32, std::move(shape), std::span<const float>(v)});
  };
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  add("model.embed_tokens.weight", {c.vocab_size, H}, w.embed_tokens);
  add("model.norm.weight", {H}, w.norm);
  if (!w.lm_head.empty()) add("lm_head.weight", {c.vocab_size, H}, w.lm_head);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto& lw = w.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {H}, lw.input_layernorm);
    add(p + "post_attention_layernorm.weight", {H}, lw.post_attention_layernorm);
    add(p + "mlp.gate_proj.weight", {I, H}, lw.gate_proj);
    add(p + "mlp.up_proj.weight", {I, H}, lw.up_proj);
    add(p + "mlp.down_proj.weight", {H, I}, lw.down_proj);
    if (lw.type == io::LayerType::LinearAttention) {
      const auto& a = lw.linear;
      const int64_t kd = c.linear_key_dim(), vd = c.linear_value_dim(), cd = c.linear_conv_dim();
      const int64_t nv = c.linear_num_value_heads;
      (void)kd;
      add(p + "linear_attn.in_proj_qkv.weight", {cd, H}, a.in_proj_qkv);
      add(p + "linear_attn.in_proj_z.weight", {vd, H}, a.in_proj_z);
      add(p + "linear_attn.in_proj_b.weight", {nv, H}, a.in_proj_b);
      add(p + "linear_attn.in_proj_a.weight", {nv, H}, a.in_proj_a);
      add(p + "linear_attn.conv1d.weight", {cd, 1, c.linear_conv_kernel_dim}, a.conv1d);
      add(p + "linear_attn.dt_bias", {nv}, a.dt_bias);
      add(p + "linear_attn.A_log", {nv}, a.A_log);
      add(p + "linear_attn.norm.weight", {c.linear_value_head_dim}, a.norm);
      add(p + "linear_attn.out_proj.weight", {H, vd}, a.out_proj);
    } else {
      const auto& a = lw.full;
      const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
      add(p + "self_attn.q_proj.weight", {2 * nh * hd, H}, a.q_proj);
      add(p + "self_attn.k_proj.weight", {nkv * hd, H}, a.k_proj);
      add(p + "self_attn.v_proj.weight", {nkv * hd, H}, a.v_proj);
      add(p + "self_attn.o_proj.weight", {H, nh * hd}, a.o_proj);
      add(p + "self_attn.q_norm.weight", {hd}, a.q_norm);
      add(p + "self_attn.k_norm.weight", {hd}, a.k_norm);
    }
  }
  io::write_safetensors(dir / "model.safetensors", t, {{"format", "pt"}});
}

}  // namespace qpu::npu
