#include "npu/idle_attention.h"

namespace qpu::npu {

void add_idle_attention_layer(compiler::Program& p) {
  // No data and no out values: nothing reaches o_proj. The key and query bits are fresh
  // values that stay +0; the op only makes the scheduler open an attention mixer.
  compiler::AttnMemory a;
  a.key_bits = p.values("idle.key", 1);
  a.query_bits = p.values("idle.query", 1);
  a.write_flag = p.value("idle.write");
  a.read_flag = p.value("idle.read");
  p.memory("idle attention", a);
}

}  // namespace qpu::npu
