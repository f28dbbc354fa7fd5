#include "npu/engine_host.h"

#include <memory>

#include "engine/model.h"

namespace qpu::npu {

HostFactory engine_host() {
  return [](const io::Qwen35Weights& w) -> Forward {
    auto model = std::make_shared<engine::Model>(w);
    auto state = std::make_shared<engine::State>(model->new_state());
    auto logits = std::make_shared<std::vector<float>>(static_cast<size_t>(w.config.vocab_size));
    return [model, state, logits](int64_t token, std::span<float> hidden) {
      model->forward(token, *state, *logits, hidden);
    };
  };
}

}  // namespace qpu::npu
