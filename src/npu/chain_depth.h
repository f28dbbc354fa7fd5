#pragma once
// The measured floor on the NPU's depth: run.c's forward pass executed on a shadow
// number type that carries, next to every float32 value, the length of its chain of
// dependent operations, counted two ways:
//  * C roundings: each float operation is one link (expf counts the longest chain of
//    roundings inside glibc's __expf_fma, 6); the max scan rounds nothing (its links
//    are compares); values from earlier positions (the KV cache) start at 0;
//  * NPU MLP sublayers under the primitives as built (`ChainCosts`): a product 1,
//    an add inside an accumulation loop 1/3 (the fused dot, npu/fused_dot.h), any other
//    add 1, a division 37 (26 by a constant), sqrtf 42, expf as given, a max over n
//    values 5 per tree level.
// The values are computed exactly as run.c computes them, so the shadow checks itself:
// its logits must equal the reference's bit for bit.
#include <vector>

#include "reference/llama2_checkpoint.h"

namespace qpu::npu {

struct ChainCosts {
  double mul = 1, add = 1, add_in_loop = 1.0 / 3.0, divide = 37, divide_const = 26, sqrt = 42, expf = 150,
         compare_level = 5;
  int expf_roundings = 6;
};

struct ChainDepth {
  int c_roundings = 0;    // longest chain of C roundings to any logit
  double sublayers = 0;   // longest chain in NPU MLP sublayers
};

class ChainShadow {
 public:
  ChainShadow(const reference::Llama2Checkpoint& checkpoint, ChainCosts costs = {});
  // run.c's forward for `token` at `pos` (positions in order from 0); the logits' values
  // go to `logits`, the depths of this position's chain are returned.
  ChainDepth forward(int token, int pos, std::vector<float>& logits);

  struct D;  // a float with its two depths (chain_depth.cpp)

 private:
  const reference::Llama2Checkpoint& ckpt_;
  ChainCosts costs_;
  std::vector<float> key_cache_, value_cache_;
};

}  // namespace qpu::npu
