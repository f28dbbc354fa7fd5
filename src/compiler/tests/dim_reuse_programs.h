#pragma once
// Random and hand-made programs for the dim-reuse tests (clear_dead_test.cpp,
// clear_inputs_test.cpp, clear_inputs_engine_test.cpp), with an independent check of
// the interval allocation and a HostSim runner.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "compiler/clear_dead.h"
#include "compiler/host_sim.h"

namespace qpu::compiler::dim_reuse_testing {

inline Lin L(std::initializer_list<Term> t) { return Lin{std::vector<Term>(t)}; }

// out = up (the up form is w1 a + w2 b, in value units), gate the constant 128.
inline Neuron copy_into(ValueId dst, std::vector<Term> up) {
  for (Term& t : up) t.weight /= 128.0f;
  return Neuron{L({{kOne, 128.0f}}), Lin{std::move(up)}, {{dst, 1.0f}}};
}

// Checks the allocation independently: two values that share a dim have disjoint live
// intervals, computed here from the schedule and the lifetimes.
inline void expect_disjoint_lives(const Program& p, const Schedule& s, const Allocation& a,
                           const std::vector<Lifetime>& lifetimes) {
  const auto n = static_cast<size_t>(p.num_values());
  const int64_t kEnd = s.num_sublayers + 1000;
  std::vector<int64_t> first(n, -1), last(n, -1);
  for (size_t i = 0; i < p.ops().size(); ++i)
    for (const auto& list : {p.ops()[i].reads(), p.ops()[i].writes()})
      for (ValueId v : list) {
        const auto u = static_cast<size_t>(v);
        first[u] = first[u] < 0 ? s.sublayer[i] : std::min(first[u], s.sublayer[i]);
        last[u] = std::max(last[u], s.sublayer[i]);
      }
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_dim;
  for (size_t v = 0; v < n; ++v) {
    const int64_t start = first[v] < 0 ? s.num_sublayers : first[v];
    int64_t lo = start, hi = kEnd;
    if (lifetimes[v] == Lifetime::Program) lo = -1;
    if (lifetimes[v] == Lifetime::ToLastAccess) hi = first[v] < 0 ? start : last[v];
    if (lifetimes[v] == Lifetime::EmbeddingToLastAccess) {
      lo = -1;
      if (first[v] >= 0) hi = last[v];
    }
    EXPECT_LT(a.dim(static_cast<ValueId>(v)), a.rail_dims[0]);
    by_dim[a.dim(static_cast<ValueId>(v))].push_back({lo, hi});
  }
  for (auto& [dim, lives] : by_dim) {
    std::sort(lives.begin(), lives.end());
    for (size_t i = 1; i < lives.size(); ++i)
      EXPECT_LT(lives[i - 1].second, lives[i].first) << "dim " << dim << " shared by overlapping lives";
  }
}

inline float rand_float(std::mt19937_64& rng, int emin, int emax) {
  const int e = emin + static_cast<int>(rng() % static_cast<uint64_t>(emax - emin + 1));
  const float x = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, e);
  return (rng() & 1) ? -x : x;
}

// A random program of copy/add neurons: values written once or several times, read
// before being written (+0), read by several later ops, outputs that are never written.
// With many_inputs = m > 0: m to 2m - 1 inputs, and a third of the terms read a random
// input (so inputs are read anywhere, some several times, some never); the draws of
// m = 0 are the original ones.
// Every value stays 0 or inside the value window (k = 48: [2^-78, 2^36]): the generator
// tracks a bound on |v| and the quantum every nonzero v is a multiple of. Each up form
// has at most two nonzero terms, so its sum is the same in every order.
//
// With `unit`, a functional unit under the idle contract (compiler/enable.h) joins: an
// input flag (0 or 1 per row) is copied into `enable` by the first op, about half of
// the values belong to the unit (every neuron that writes them is gated by 128 *
// enable, so they are +0 on every row whose flag is 0), and about half of the ops also
// clear one value they read, exactly (gate 128 * enable or the constant, up +-v/128,
// down -+1: both shapes), like npu::matvec_unit's rotating values. `wrong` is a second,
// independent flag (for the mutation tests).
struct RandomProgram {
  Program p;
  Interface io;
  ValueId enable = -1, wrong = -1;
  std::map<ValueId, ValueId> enable_of;  // unit values (and the enable itself) -> enable
  int64_t self_clears = 0;               // clear neurons the generator wrote
};

inline RandomProgram random_program(uint64_t seed, int64_t rows, bool unit = false, int many_inputs = 0) {
  std::mt19937_64 rng(seed);
  RandomProgram r;
  Program& p = r.p;
  const int ni = many_inputs > 0 ? many_inputs + static_cast<int>(rng() % static_cast<uint64_t>(many_inputs))
                                 : 2 + static_cast<int>(rng() % 4);
  const int nv = 30 + static_cast<int>(rng() % 60);
  const auto in = p.values("in", ni);
  const auto v = p.values("v", nv);
  std::vector<char> in_unit(static_cast<size_t>(ni + nv), 0), dead(static_cast<size_t>(ni + nv), 0);
  std::vector<ValueId> flags;
  if (unit) {
    flags = p.values("flag", 2);
    r.enable = p.value("enable");
    r.wrong = p.value("wrong");
    p.mlp("enable", {copy_into(r.enable, {{flags[0], 1.0f}}), copy_into(r.wrong, {{flags[1], 1.0f}})});
    for (ValueId x : v) in_unit[static_cast<size_t>(x)] = static_cast<char>(rng() % 2);
    r.enable_of[r.enable] = r.enable;
  }
  std::vector<double> hi(static_cast<size_t>(ni + nv), 0.0), quantum(static_cast<size_t>(ni + nv), INFINITY);
  for (ValueId x : in) {
    hi[static_cast<size_t>(x)] = 0x1p9;
    quantum[static_cast<size_t>(x)] = 0x1p-31;
  }
  std::vector<ValueId> readable(in.begin(), in.end());
  std::vector<bool> written(static_cast<size_t>(ni + nv), false);
  size_t next_fresh = 0;
  const int n_ops = 20 + static_cast<int>(rng() % 40);
  const float weights[] = {1.0f, -1.0f, 0.5f, -0.5f, 2.0f, -2.0f, 0.25f};
  for (int o = 0; o < n_ops; ++o) {
    std::vector<Neuron> neurons;
    std::vector<ValueId> dests;
    const int k = 1 + static_cast<int>(rng() % 3);
    std::vector<std::pair<ValueId, std::pair<double, double>>> updates;
    for (int j = 0; j < k; ++j) {
      ValueId dst;
      if (rng() % 5 == 0 || next_fresh >= v.size()) {
        dst = v[rng() % v.size()];  // maybe written before: v += ...
      } else {
        dst = v[next_fresh++];
      }
      if (std::find(dests.begin(), dests.end(), dst) != dests.end() || dead[static_cast<size_t>(dst)]) continue;
      std::vector<Term> up;
      const int terms = 1 + static_cast<int>(rng() % 2);
      double h = written[static_cast<size_t>(dst)] ? hi[static_cast<size_t>(dst)] : 0.0;
      double q = written[static_cast<size_t>(dst)] ? quantum[static_cast<size_t>(dst)] : static_cast<double>(INFINITY);
      for (int t = 0; t < terms; ++t) {
        // Mostly recent values (long chains), sometimes anything (also never written: +0).
        ValueId a = -1;
        if (many_inputs > 0 && rng() % 3 == 0)
          a = in[rng() % in.size()];  // many inputs: each read anywhere, some several times
        else
          a = rng() % 8 == 0 ? static_cast<ValueId>(rng() % static_cast<uint64_t>(ni + nv))
                             : readable[readable.size() - 1 - rng() % std::min<size_t>(readable.size(), 6)];
        if ((!up.empty() && up[0].value == a) || dead[static_cast<size_t>(a)]) continue;  // dead: cleared for good
        const float w = weights[rng() % 7];
        up.push_back({a, w});
        h += std::fabs(static_cast<double>(w)) * hi[static_cast<size_t>(a)];
        q = std::min(q, std::fabs(static_cast<double>(w)) * quantum[static_cast<size_t>(a)]);
      }
      if (h > 0x1p30 || q < 0x1p-70 || up.empty()) continue;  // would leave the window (or read nothing): skip
      dests.push_back(dst);
      updates.push_back({dst, {h, q}});
      neurons.push_back(copy_into(dst, up));
      if (in_unit[static_cast<size_t>(dst)]) neurons.back().gate.terms[0].value = r.enable;
    }
    if (neurons.empty()) continue;
    if (unit && rng() % 2 == 0) {
      // An exact clear of a value this op reads (not an input, not a destination here).
      const Neuron& reader = neurons[rng() % neurons.size()];
      const ValueId a = reader.up.terms[rng() % reader.up.terms.size()].value;
      if (a >= ni && a < ni + nv && std::find(dests.begin(), dests.end(), a) == dests.end()) {
        const float sign = rng() % 2 ? 1.0f : -1.0f;
        const ValueId gate = in_unit[static_cast<size_t>(a)] && rng() % 4 != 0 ? r.enable : kOne;
        neurons.push_back(Neuron{L({{gate, 128.0f}}), L({{a, sign / 128.0f}}), {{a, -sign}}});
        dests.push_back(a);
        updates.push_back({a, {0.0, static_cast<double>(INFINITY)}});
        dead[static_cast<size_t>(a)] = 1;  // no op reads or writes it again
        ++r.self_clears;
      }
    }
    p.mlp("op" + std::to_string(o), std::move(neurons));
    for (const auto& [dst, hq] : updates) {
      hi[static_cast<size_t>(dst)] = hq.first;
      quantum[static_cast<size_t>(dst)] = hq.second;
      written[static_cast<size_t>(dst)] = true;
      readable.push_back(dst);
    }
  }
  // Outputs: a few written values, one maybe never written, sometimes an input.
  const int no = 2 + static_cast<int>(rng() % 4);
  for (int o = 0; o < no; ++o) {
    const ValueId x = readable[readable.size() - 1 - rng() % std::min<size_t>(readable.size(), 10)];
    if (std::find(r.io.outputs.begin(), r.io.outputs.end(), x) == r.io.outputs.end()) r.io.outputs.push_back(x);
  }
  if (rng() % 2) r.io.outputs.push_back(v[v.size() - 1]);  // maybe never written: +0
  if (rng() % 3 == 0) r.io.outputs.push_back(in[0]);
  r.io.inputs = in;
  r.io.inputs.insert(r.io.inputs.end(), flags.begin(), flags.end());
  r.io.vocab_size = std::max<int64_t>(rows, static_cast<int64_t>(r.io.outputs.size()));
  for (int64_t row = 0; row < r.io.vocab_size; ++row) {
    for (int i = 0; i < ni; ++i) {
      const uint64_t c = rng() % 16;
      r.io.input_rows.push_back(c == 0 ? 0.0f : c == 1 ? -0.0f : rand_float(rng, -8, 8));
    }
    // Rows 0 and 1: the unit idle and running; then random (the wrong flag independent).
    if (unit) {
      r.io.input_rows.push_back(row < 2 ? static_cast<float>(row) : static_cast<float>(rng() % 2));
      r.io.input_rows.push_back(static_cast<float>(rng() % 2));
    }
  }
  // x and -x in one row: exact cancellations to +0 inside the program.
  const auto stride = r.io.inputs.size();
  if (ni >= 2 && r.io.vocab_size > 1) r.io.input_rows[stride + 1] = -r.io.input_rows[stride];
  for (size_t x = 0; x < in_unit.size(); ++x)
    if (in_unit[x]) r.enable_of[static_cast<ValueId>(x)] = r.enable;
  return r;
}

// Logits (the outputs) of every vocab row, one token per row in a fresh simulator.
inline std::vector<uint32_t> run(const io::Qwen35Weights& w, const Interface& io, uint64_t seed) {
  std::vector<uint32_t> bits;
  std::vector<float> logits(static_cast<size_t>(io.vocab_size)), hidden(static_cast<size_t>(w.config.hidden_size));
  for (int64_t t = 0; t < io.vocab_size; ++t) {
    HostSim sim(w, seed + static_cast<uint64_t>(t));
    sim.forward(t, logits, hidden);
    for (size_t o = 0; o < io.outputs.size(); ++o) bits.push_back(float_bits(logits[o]));
  }
  return bits;
}

// clear_inputs with enable-gated input clears (clear_dead.h, "Inputs") on a
// random_program(..., unit = true, many_inputs): each plain input joins the unit with
// probability 2/3, its clear gated by the computed enable or by the flag input itself
// (an input: its idle rows become -0 at random, and it may be its own enable). Promise
// (b): a unit input is made +-0 (either sign) on every row whose flag is +-0; the
// flag's rows are exactly 1 or +-0 (promise (a)). Returns the generator's enable_of
// plus these entries, with clear_inputs; `gated` gets the unit inputs.
inline DeadClearOptions gate_inputs(RandomProgram& r, uint64_t seed, std::vector<ValueId>* gated = nullptr) {
  std::mt19937_64 rng(seed);
  DeadClearOptions opt;
  opt.enable_of = r.enable_of;
  opt.clear_inputs = true;
  const size_t stride = r.io.inputs.size(), ni = stride - 2;  // inputs, then the flag and `wrong`'s flag
  const ValueId flag = r.io.inputs[ni];
  auto idle = [&](int64_t row) { return r.io.input_rows[static_cast<size_t>(row) * stride + ni] == 0.0f; };
  for (int64_t row = 0; row < r.io.vocab_size; ++row)
    if (idle(row) && rng() % 2) r.io.input_rows[static_cast<size_t>(row) * stride + ni] = -0.0f;
  if (rng() % 2) opt.enable_of[flag] = flag;
  for (size_t i = 0; i < ni; ++i) {
    const uint64_t c = rng() % 3;
    if (c == 0) continue;
    const ValueId x = r.io.inputs[i];
    opt.enable_of[x] = c == 1 ? r.enable : flag;
    if (gated != nullptr) gated->push_back(x);
    for (int64_t row = 0; row < r.io.vocab_size; ++row)
      if (idle(row)) r.io.input_rows[static_cast<size_t>(row) * stride + i] = rng() % 2 ? 0.0f : -0.0f;
  }
  return opt;
}

}  // namespace qpu::compiler::dim_reuse_testing
