#pragma once
// A host state (engine::State) as a file, so that another runtime can take over a run
// at a chosen cycle: stock transformers loads it into its own cache object and runs the
// next host tokens there (python/resume_from_snapshot.py). A story is about a million
// host cycles, far more than a stock runtime runs in a test; snapshots let it check
// slices from anywhere in a run.
//
// Format: one safetensors file, fp32 tensors, metadata {"format": "qpu-state-v1",
// "position": N} (the tokens consumed so far), and per model layer i:
//   layers.i.conv_state       [conv_dim, kernel - 1]   a GDN layer's last conv inputs, oldest first
//   layers.i.recurrent_state  [v_heads, dk, dv]        its delta-rule memory
//   layers.i.key_cache        [N, kv_heads, head_dim]  an attention layer's keys (after norm and RoPE)
//   layers.i.value_cache      [N, kv_heads, head_dim]  ... and values
// A layer whose mixer the engine skips (its output projection is all +0, so its state
// cannot change any output) has no tensors: a reader gives it zeros of the config's shapes.
#include <cstdint>
#include <filesystem>

#include "engine/model.h"

namespace qpu::engine {

// Writes `state` of `model` to `path` (atomically: a temporary name, then a rename).
void write_state_snapshot(const std::filesystem::path& path, const Model& model, const State& state);

// A State of `model` from a snapshot written for a model of the same config. Throws
// qpu::Error naming the file and the tensor when a tensor is missing, has another shape
// or belongs to a layer the model skips, or the format is not qpu-state-v1.
State read_state_snapshot(const std::filesystem::path& path, const Model& model);

}  // namespace qpu::engine
