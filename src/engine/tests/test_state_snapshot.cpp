// engine::write_state_snapshot / read_state_snapshot: a run stopped after k tokens,
// written, read back into a fresh State and continued gives the same logits and states,
// bit for bit, as the run that never stopped (random wired checkpoints with idle and
// skipped mixers, many seeds and stop points); files that do not fit the model are
// errors naming the file and the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "common/testing/scratch_files.h"
#include "engine/model.h"
#include "engine/state_snapshot.h"
#include "idle_wiring.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace qpu::engine {
namespace {

using qpu::testing::ScratchDir;

template <typename F>
void expect_error(F&& action, const std::string& fragment) {
  try {
    action();
    ADD_FAILURE() << "no error; expected '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(StateSnapshot, AResumedRunIsTheRunThatNeverStopped) {
  ScratchDir dir;
  int64_t skipped_seen = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    io::Qwen35Weights w = testing::random_checkpoint(seed);
    if (seed % 2 == 1) {  // idle mixers: a GDN and an attention layer whose output projection is all +0
      auto& gdn = w.layers[1].linear.out_proj;
      std::fill(gdn.begin(), gdn.end(), 0.0f);
      auto& att = w.layers[2].full.o_proj;
      std::fill(att.begin(), att.end(), 0.0f);
    }
    const Model model(std::move(w));
    skipped_seen += static_cast<int64_t>(model.skipped_mixers().size());
    const int64_t vocab = model.config().vocab_size;
    const std::vector<int64_t> tokens = testing::random_tokens(seed, vocab, 30);
    const size_t stop = 1 + seed % 23;  // after `stop` tokens
    std::vector<float> a(static_cast<size_t>(vocab)), b(a.size());
    State whole = model.new_state();
    for (size_t i = 0; i < stop; ++i) model.forward(tokens[i], whole, a);
    const auto path = dir / ("state-" + std::to_string(seed) + ".safetensors");
    write_state_snapshot(path, model, whole);
    State resumed = read_state_snapshot(path, model);
    ASSERT_EQ(resumed.position, static_cast<int64_t>(stop));
    for (size_t i = stop; i < tokens.size(); ++i) {
      model.forward(tokens[i], whole, a);
      model.forward(tokens[i], resumed, b);
      testing::expect_bits(b, a, "seed " + std::to_string(seed) + " logits after token " + std::to_string(i));
    }
    for (size_t l = 0; l < whole.conv_state.size(); ++l) {
      const std::string where = "seed " + std::to_string(seed) + " layer " + std::to_string(l);
      testing::expect_bits(resumed.conv_state[l], whole.conv_state[l], where + " conv_state");
      testing::expect_bits(resumed.recurrent_state[l], whole.recurrent_state[l], where + " recurrent_state");
      testing::expect_bits(resumed.key_cache[l], whole.key_cache[l], where + " key_cache");
      testing::expect_bits(resumed.value_cache[l], whole.value_cache[l], where + " value_cache");
    }
  }
  EXPECT_GT(skipped_seen, 0);  // some layers kept no state and were left out of the files
}

TEST(StateSnapshot, FilesThatDoNotFitTheModelAreErrors) {
  ScratchDir dir;
  const Model model(testing::random_checkpoint(3));
  std::vector<float> logits(static_cast<size_t>(model.config().vocab_size));
  State state = model.new_state();
  for (int64_t t : {4, 7, 1}) model.forward(t, state, logits);
  const auto good = dir / "good.safetensors";
  write_state_snapshot(good, model, state);
  const io::SafetensorsFile file(good);
  ASSERT_FALSE(file.tensors().empty());
  std::vector<io::TensorToWrite> tensors;
  std::vector<std::vector<float>> data;
  for (const auto& t : file.tensors()) data.push_back(file.read_f32(t));
  for (size_t i = 0; i < file.tensors().size(); ++i)
    tensors.push_back({file.tensors()[i].name, io::DType::F32, file.tensors()[i].shape, data[i]});
  const auto meta = file.header().metadata;

  // A missing tensor.
  const auto missing = dir / "missing.safetensors";
  std::vector<io::TensorToWrite> fewer(tensors.begin() + 1, tensors.end());
  io::write_safetensors(missing, fewer, meta);
  expect_error([&] { read_state_snapshot(missing, model); }, "'" + tensors[0].name + "' is missing");
  // Another shape.
  const auto shape = dir / "shape.safetensors";
  std::vector<io::TensorToWrite> reshaped = tensors;
  std::vector<float> one(1, 0.0f);
  reshaped[0].shape = {1};
  reshaped[0].values = one;
  io::write_safetensors(shape, reshaped, meta);
  expect_error([&] { read_state_snapshot(shape, model); }, "'" + tensors[0].name + "' has shape [1]");
  // A tensor the model keeps no state for.
  const auto extra = dir / "extra.safetensors";
  std::vector<io::TensorToWrite> more = tensors;
  more.push_back({"layers.99.conv_state", io::DType::F32, {1}, one});
  io::write_safetensors(extra, more, meta);
  expect_error([&] { read_state_snapshot(extra, model); }, "tensors, the model's state has");
  // Not a snapshot.
  const auto other = dir / "other.safetensors";
  io::write_safetensors(other, tensors, {{"format", "pt"}});
  expect_error([&] { read_state_snapshot(other, model); }, "not a host state snapshot");
  const auto nopos = dir / "nopos.safetensors";
  io::write_safetensors(nopos, tensors, {{"format", "qpu-state-v1"}, {"position", "-3"}});
  expect_error([&] { read_state_snapshot(nopos, model); }, "no valid position");
  expect_error([&] { read_state_snapshot(dir / "absent.safetensors", model); }, "absent.safetensors");
}

}  // namespace
}  // namespace qpu::engine
