#pragma once
// The conformance suite's host: the project's Qwen3.5 engine (src/engine).
#include <functional>

#include "compiler/emit.h"
#include "engine/model.h"
#include "npu/suite.h"

namespace qpu::npu {

HostFactory engine_host();

// Compiles a scheduled, allocated Program straight into an engine model, one dense layer
// at a time (compiler::LayerEmitter feeding engine::Model's layer source): the model of
// engine::Model(compiler::emit(...) with adjust_globals applied), bit for bit, without the
// dense checkpoint ever existing (docs/engine.md, "Streaming construction").
// adjust_globals sees the config, embed_tokens, norm and lm_head before packing (e.g. to
// install LM head rows); it must not change what the layers' shapes depend on.
engine::Model emit_model(const compiler::Program& program, const compiler::Schedule& schedule,
                         const compiler::Allocation& allocation, const compiler::Interface& interface,
                         const compiler::EmitOptions& emit_options, const engine::ModelOptions& model_options = {},
                         const std::function<void(io::Qwen35Weights& globals)>& adjust_globals = {});

}  // namespace qpu::npu
