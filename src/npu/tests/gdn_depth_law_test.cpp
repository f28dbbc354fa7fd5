// The depth law of docs/npu-machine.md ("The depth law"), on the host itself: a layer's GDN
// state holds functions of that layer's input only. The same memory head (identical
// weights) sits in layers 0 and 2; the row to write is computed by the MLPs of
// layers 0 and 1, so it exists in the residual stream only from layer 2 on. At token 1
// both heads see the write flag of that computed row (0 at layer 0, 1 at layer 2); at
// token 2 both read the address: layer 2 returns the row, layer 0 returns +0 — what a
// deeper layer wrote never reaches a shallower one at a later token. The control case
// feeds the flag and row from the token embedding: then layer 0 reads it as well.
#include <gtest/gtest.h>

#include <random>

#include "common/float_bits.h"
#include "compiler/emit.h"
#include "compiler/host_sim.h"
#include "engine/model.h"

namespace qpu::npu {
namespace {

using compiler::kOne;
using compiler::Lin;
using compiler::Neuron;
using compiler::Program;
using compiler::ValueId;

constexpr int kBits = 7, kData = 100;

// dst += src, exactly (gate silu(128) = 128, up src / 128).
std::vector<Neuron> copies(const std::vector<ValueId>& src, const std::vector<ValueId>& dst) {
  std::vector<Neuron> n;
  for (size_t i = 0; i < src.size(); ++i)
    n.push_back(Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{src[i], 1.0f / 128.0f}}}, {{dst[i], 1.0f}}});
  return n;
}

struct DepthCase {
  compiler::Compiled compiled;
  std::vector<ValueId> out0, out2;
  std::vector<float> row;  // the data written at token 1
  std::vector<int64_t> sublayers;
};

// computed_row: the heads write the row computed in layers 0-1 (the law), or the
// embedding's row directly (the control).
DepthCase build(bool computed_row) {
  Program p;
  const auto addr = p.values("addr", kBits);
  const ValueId wf_in = p.value("write_in");
  const auto data_in = p.values("data_in", kData);
  const auto query = p.values("query", kBits);
  const ValueId rf = p.value("read");
  const ValueId wf1 = p.value("write1"), wf3 = p.value("write3");
  const auto d1 = p.values("data1", kData), d3 = p.values("data3", kData);
  DepthCase c;
  c.out0 = p.values("out_layer0", kData);
  c.out2 = p.values("out_layer2", kData);
  compiler::GdnMemory m;
  m.key_bits = addr;
  m.write_flag = computed_row ? wf3 : wf_in;
  m.data = computed_row ? d3 : data_in;
  m.query_bits = query;
  m.read_flag = rf;
  m.offset = 4096.0f;
  m.out = c.out0;
  // Program order puts the first head before the copies: it reads write3/data3 while
  // they are still +0, so it is scheduled into layer 0's mixer.
  p.gdn_memory("head in layer 0", m);
  std::vector<ValueId> s1 = data_in, t1 = d1, s3 = d1, t3 = d3;
  s1.push_back(wf_in), t1.push_back(wf1), s3.push_back(wf1), t3.push_back(wf3);
  p.mlp("copy to layer-1 values", copies(s1, t1));
  p.mlp("copy to layer-2 values", copies(s3, t3));
  m.out = c.out2;
  if (!computed_row) {  // the control: the second head must still land in layer 2
    m.write_flag = wf3;
    m.data = d3;
  }
  p.gdn_memory("head in layer 2", m);

  compiler::Interface io;
  io.inputs = addr;
  io.inputs.push_back(wf_in);
  io.inputs.insert(io.inputs.end(), data_in.begin(), data_in.end());
  io.inputs.insert(io.inputs.end(), query.begin(), query.end());
  io.inputs.push_back(rf);
  io.vocab_size = 3;
  const size_t w = io.inputs.size();
  io.input_rows.assign(3 * w, 0.0f);
  std::mt19937_64 rng(17);
  const int64_t address = 93;
  for (int b = 0; b < kBits; ++b) {
    io.input_rows[w + static_cast<size_t>(b)] = static_cast<float>((address >> b) & 1);                    // token 1: key
    io.input_rows[2 * w + kBits + 1 + kData + static_cast<size_t>(b)] = static_cast<float>((address >> b) & 1);  // token 2: query
  }
  io.input_rows[w + kBits] = 1.0f;                       // token 1 writes
  for (int d = 0; d < kData; ++d) {
    c.row.push_back(static_cast<float>(static_cast<int>(rng() % 8000) - 3900));
    io.input_rows[w + kBits + 1 + static_cast<size_t>(d)] = c.row.back();
  }
  io.input_rows[3 * w - 1] = 1.0f;                       // token 2 reads
  c.compiled = compiler::compile(p, io);
  c.sublayers = c.compiled.schedule.sublayer;
  return c;
}

// Runs tokens 0, 1, 2 and returns the residual after token 2.
template <class Step>
std::vector<float> run(const DepthCase& c, Step step) {
  std::vector<float> hidden(static_cast<size_t>(c.compiled.weights.config.hidden_size));
  for (int64_t t = 0; t < 3; ++t) step(t, hidden);
  return hidden;
}

void expect_row(const DepthCase& c, const std::vector<float>& hidden, const std::vector<ValueId>& out, bool present,
                const char* what) {
  int64_t bad = 0;
  for (int d = 0; d < kData; ++d) {
    const float got = hidden[static_cast<size_t>(c.compiled.allocation.dim(out[static_cast<size_t>(d)]))];
    const float want = present ? c.row[static_cast<size_t>(d)] : 0.0f;
    if (float_bits(got) != float_bits(want) && bad++ < 3)
      ADD_FAILURE() << what << " value " << d << ": expected " << describe_float(want) << " got " << describe_float(got);
  }
  EXPECT_EQ(bad, 0) << what;
}

std::vector<float> on_engine(const DepthCase& c) {
  engine::Model model(c.compiled.weights);
  engine::State state = model.new_state();
  std::vector<float> logits(static_cast<size_t>(c.compiled.weights.config.vocab_size));
  return run(c, [&](int64_t t, std::vector<float>& h) { model.forward(t, state, logits, h); });
}

std::vector<float> on_sim(const DepthCase& c) {
  compiler::HostSim sim(c.compiled.weights, 23);
  std::vector<float> logits(1);
  return run(c, [&](int64_t t, std::vector<float>& h) { sim.forward(t, logits, h); });
}

TEST(GdnDepthLaw, ALayerNeverReadsWhatADeeperLayerWrote) {
  const DepthCase c = build(true);
  ASSERT_EQ(c.compiled.weights.config.num_hidden_layers, 3);
  EXPECT_EQ(c.sublayers.front(), 0);  // layer 0's mixer
  EXPECT_EQ(c.sublayers.back(), 4);   // layer 2's mixer
  // The two heads are the same memory: identical GDN input weights in layers 0 and 2.
  const auto& l0 = c.compiled.weights.layers[0].linear;
  const auto& l2 = c.compiled.weights.layers[2].linear;
  EXPECT_EQ(l0.in_proj_qkv, l2.in_proj_qkv);
  EXPECT_EQ(l0.conv1d, l2.conv1d);
  EXPECT_EQ(l0.in_proj_b, l2.in_proj_b);
  EXPECT_EQ(l0.in_proj_z, l2.in_proj_z);
  for (const auto& [name, hidden] : {std::pair{"engine", on_engine(c)}, std::pair{"HostSim", on_sim(c)}}) {
    SCOPED_TRACE(name);
    expect_row(c, hidden, c.out2, true, "layer 2 reads its own write");
    expect_row(c, hidden, c.out0, false, "layer 0 reads the deeper write");
  }
}

TEST(GdnDepthLaw, ControlALayerReadsWhatItsOwnInputWrote) {
  const DepthCase c = build(false);
  EXPECT_EQ(c.sublayers.front(), 0);
  EXPECT_EQ(c.sublayers.back(), 4);
  for (const auto& [name, hidden] : {std::pair{"engine", on_engine(c)}, std::pair{"HostSim", on_sim(c)}}) {
    SCOPED_TRACE(name);
    expect_row(c, hidden, c.out0, true, "layer 0 reads the embedding's write");
    expect_row(c, hidden, c.out2, true, "layer 2 reads the copied write");
  }
}

}  // namespace
}  // namespace qpu::npu
