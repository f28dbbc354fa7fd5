#include "npu/engine_host.h"

#include <memory>

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

engine::Model emit_model(const compiler::Program& program, const compiler::Schedule& schedule,
                         const compiler::Allocation& allocation, const compiler::Interface& interface,
                         const compiler::EmitOptions& emit_options, const engine::ModelOptions& model_options,
                         const std::function<void(io::Qwen35Weights& globals)>& adjust_globals) {
  // The emitter runs every check of emit before the model asks for the first layer.
  const compiler::LayerEmitter emitter(program, schedule, allocation, interface, emit_options);
  io::Qwen35Weights globals = emitter.globals();
  if (adjust_globals) adjust_globals(globals);
  return engine::Model(std::move(globals), [&emitter](int64_t l) { return emitter.layer(l); }, model_options);
}

}  // namespace qpu::npu
