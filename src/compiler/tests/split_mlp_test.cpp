// split_wide_mlps (split_mlp.h): random programs of wide MLP ops are cut into ops within
// the limit that keep every neuron, give each written value all its down terms from one
// part, never read what another part of the same op writes, keep labels and memory ops,
// and carry the explicit orders over; selects are cut into runs of consecutive neurons;
// a part wider than the limit is refused by name. That the split program computes the
// same bits is checked on real units (npu/tests/table_lookup_test.cpp) and on the token
// machine (the story tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "compiler/schedule.h"
#include "compiler/split_mlp.h"

namespace qpu::compiler {
namespace {

// A neuron of a group: it writes the group's first value (so a group is one part) and
// maybe another of the group's values, and reads inputs and, sometimes, a value its group
// writes.
Neuron group_neuron(std::mt19937_64& rng, const std::vector<ValueId>& inputs, const std::vector<ValueId>& outs) {
  Neuron n;
  n.gate.terms.push_back({inputs[rng() % inputs.size()], 128.0f});
  n.up.terms.push_back({rng() % 8 == 0 ? outs[rng() % outs.size()] : inputs[rng() % inputs.size()], 0.5f});
  n.down.push_back({outs[0], static_cast<float>(1 + rng() % 4)});
  if (rng() % 2) n.down.push_back({outs[rng() % outs.size()], 2.0f});
  return n;
}

// A neuron's identity for the multiset check: its terms as text.
std::string describe(const Neuron& n) {
  std::string s;
  for (const Lin* l : {&n.gate, &n.up}) {
    for (const Term& t : l->terms) s += std::to_string(t.value) + "*" + std::to_string(t.weight) + " ";
    s += "| ";
  }
  for (const Term& t : n.down) s += std::to_string(t.value) + "*" + std::to_string(t.weight) + " ";
  return s;
}

TEST(SplitWideMlps, RandomWideOpsKeepEveryNeuronAndEachValueInOnePart) {
  int64_t split_ops = 0, parts = 0, refused = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    Program p;
    const std::vector<ValueId> inputs = p.values("in", 6);
    const int64_t max = 2 + static_cast<int64_t>(rng() % 12);
    size_t widest = 0;  // the widest group: the widest part
    for (int k = 0; k < 6; ++k) {
      if (rng() % 4 == 0) {
        GdnMemory m;
        m.data = {inputs[0]};
        m.out = {p.value("mem" + std::to_string(k))};
        p.gdn_memory("memory " + std::to_string(k), m);
        continue;
      }
      // Groups of neurons that share their values, interleaved in neuron order; in one
      // program of eight a group may be wider than the limit.
      const size_t groups = 1 + rng() % 12;
      std::vector<std::vector<ValueId>> outs;
      std::vector<size_t> left;
      for (size_t g = 0; g < groups; ++g) {
        outs.push_back(p.values("o" + std::to_string(k) + "." + std::to_string(g), 1 + static_cast<int>(rng() % 3)));
        const bool wide = seed % 8 == 0 && g == 0;
        left.push_back(1 + rng() % static_cast<uint64_t>(wide ? 2 * max : max));
        widest = std::max(widest, left.back());
      }
      std::vector<Neuron> neurons;
      for (size_t active = groups; active > 0;) {
        const size_t g = rng() % groups;
        if (left[g] == 0) continue;
        neurons.push_back(group_neuron(rng, inputs, outs[g]));
        if (--left[g] == 0) --active;
      }
      p.mlp("op " + std::to_string(k), std::move(neurons));
    }
    if (p.ops().size() >= 2) p.order(OpRange{0, 1}, OpRange{p.ops().size() - 1, p.ops().size()});

    // The parts of each op, found by label (labels are unique per original op here).
    std::map<std::string, size_t> original;
    for (size_t i = 0; i < p.ops().size(); ++i) original[p.ops()[i].label] = i;
    if (static_cast<int64_t>(widest) > max) {
      try {
        (void)split_wide_mlps(p, max);
        ADD_FAILURE() << "a part of " << widest << " neurons accepted under a limit of " << max << " (seed " << seed << ")";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(" neurons that write one value"), std::string::npos) << e.what();
        ++refused;
      }
      continue;
    }
    const Program out = split_wide_mlps(p, max);
    ASSERT_EQ(out.num_values(), p.num_values());
    std::map<size_t, std::vector<size_t>> pieces;
    for (size_t j = 0; j < out.ops().size(); ++j) {
      const auto it = original.find(out.ops()[j].label);
      ASSERT_NE(it, original.end()) << out.ops()[j].label;
      ASSERT_TRUE(pieces[it->second].empty() || pieces[it->second].back() + 1 == j) << "parts of one op are adjacent";
      pieces[it->second].push_back(j);
    }
    for (const auto& [i, js] : pieces) {
      const Op& op = p.ops()[i];
      if (op.kind != OpKind::Mlp || static_cast<int64_t>(op.neurons.size()) <= max) {
        ASSERT_EQ(js.size(), 1u);
        EXPECT_EQ(out.ops()[js[0]].kind, op.kind);
        EXPECT_EQ(out.ops()[js[0]].neurons.size(), op.neurons.size());
        continue;
      }
      ++split_ops;
      parts += static_cast<int64_t>(js.size());
      std::multiset<std::string> want, got;
      for (const Neuron& n : op.neurons) want.insert(describe(n));
      std::map<ValueId, size_t> writer_part;
      for (size_t j : js) {
        const Op& part = out.ops()[j];
        EXPECT_LE(static_cast<int64_t>(part.neurons.size()), max);
        for (const Neuron& n : part.neurons) got.insert(describe(n));
        for (ValueId v : part.writes()) {
          const auto [it, added] = writer_part.emplace(v, j);
          EXPECT_TRUE(added) << "value " << v << " written by two parts of op " << i << " (seed " << seed << ")";
        }
      }
      EXPECT_EQ(got, want) << "seed " << seed;
      for (size_t j : js)
        for (ValueId v : out.ops()[j].reads()) {
          const auto it = writer_part.find(v);
          EXPECT_TRUE(it == writer_part.end() || it->second == j) << "a part reads what another part writes";
        }
    }
    // The order now spans the first op's parts and the last op's parts.
    if (!p.orders().empty()) {
      ASSERT_EQ(out.orders().size(), 1u);
      const OpOrder& o = out.orders()[0];
      EXPECT_EQ(o.before.begin, pieces[0].front());
      EXPECT_EQ(o.before.end, pieces[0].back() + 1);
      EXPECT_EQ(o.after.begin, pieces[p.ops().size() - 1].front());
      EXPECT_EQ(o.after.end, out.ops().size());
      ScheduleLimits limits;
      limits.max_neurons_per_mlp = max;
      const Schedule s = schedule(out, limits);
      check_schedule(out, s, limits);
    }
  }
  std::printf("split_wide_mlps: %lld wide ops cut into %lld parts, %lld programs refused\n",
              static_cast<long long>(split_ops), static_cast<long long>(parts), static_cast<long long>(refused));
  EXPECT_GT(split_ops, 200);
  EXPECT_GT(parts, 2 * split_ops);
  EXPECT_GT(refused, 5);
}

TEST(SplitWideMlps, SelectsAreCutIntoRunsOfConsecutiveNeurons) {
  Program p;
  const std::vector<ValueId> hot = p.values("hot", 10);
  const std::vector<ValueId> out = p.values("out", 3);
  std::vector<Neuron> rows;
  for (int r = 0; r < 10; ++r)
    rows.push_back(Neuron{Lin{{{hot[static_cast<size_t>(r)], 128.0f}}}, Lin{{{hot[static_cast<size_t>(r)], 1.0f / 128}}},
                          {{out[0], static_cast<float>(r + 1)}, {out[2], -static_cast<float>(r)}}});
  p.mlp_select("select", rows);
  const Program s = split_wide_mlps(p, 4);
  ASSERT_EQ(s.ops().size(), 3u);  // 4 + 4 + 2
  size_t r = 0;
  for (const Op& op : s.ops()) {
    EXPECT_TRUE(op.one_live_neuron);
    EXPECT_EQ(op.label, "select");
    for (const Neuron& n : op.neurons) EXPECT_EQ(describe(n), describe(rows[r++]));
  }
  EXPECT_EQ(r, rows.size());
  // They write the same values, so the scheduler puts them one after another.
  ScheduleLimits limits;
  limits.max_neurons_per_mlp = 4;
  const Schedule sch = schedule(s, limits);
  EXPECT_EQ(sch.sublayer, (std::vector<int64_t>{1, 3, 5}));
  // Without the promise the same op is one part of 10 neurons (every neuron writes out[0]).
  Program plain;
  plain.values("hot", 10);
  plain.values("out", 3);
  plain.mlp("select", rows);
  try {
    (void)split_wide_mlps(plain, 4);
    FAIL() << "a 10-neuron part accepted under a limit of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'select' has 10 neurons"), std::string::npos) << e.what();
  }
}

TEST(SplitWideMlps, OpsWithinTheLimitAreCopiedAsTheyAre) {
  Program p;
  const ValueId a = p.value("a"), b = p.value("b");
  p.mlp("narrow", {Neuron{Lin{{{a, 128.0f}}}, Lin{{{a, 1.0f}}}, {{b, 1.0f}}}});
  p.mlp_select("narrow select", {Neuron{Lin{{{a, 128.0f}}}, Lin{{{a, 1.0f}}}, {{b, 1.0f}}}});
  const Program s = split_wide_mlps(p, 1);
  ASSERT_EQ(s.ops().size(), 2u);
  EXPECT_FALSE(s.ops()[0].one_live_neuron);
  EXPECT_TRUE(s.ops()[1].one_live_neuron);
  EXPECT_EQ(s.name(b), "b");
  EXPECT_THROW((void)split_wide_mlps(p, 0), Error);
}

}  // namespace
}  // namespace qpu::compiler
