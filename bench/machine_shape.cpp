// Where a token machine's size as a dense checkpoint comes from (a diagnostic, no run):
// the shape (layers, hidden, intermediate, GDN heads per layer, vocab) and parameter
// count of the stories260K token machine for P positions, the residual dims live per
// sublayer (percentiles, with interface inputs live from the embedding as the allocator
// keeps them), and per band of layers the widest residual, the neurons (max and mean)
// and the micro-op families with the most neurons there.
//
//   machine_shape [positions=16] [bands=40]
//
// Environment: QPU_MODEL / QPU_RANDOM_MODEL pick another nested model (nested_model below);
// QPU_KV_BANKS=n, QPU_LANES=n, QPU_MAX_NEURONS=n, QPU_MAX_MEMORIES=n and
// QPU_SEGMENTS=sum,wsum,slow replace runner::token_machine_options' KV banks, SWIGLU chunk
// lanes, neurons per MLP sublayer, GDN memories per mixer and the attention chains' blocks
// per segment; QPU_SLOW_BESIDE=1 puts SLOW's chain beside WSUM's when they share heads
// (to see what a machine option costs before changing it); QPU_DEADLINE=1 schedules by
// deadline and QPU_CLEAR_ROOM=n leaves n neurons per MLP sublayer to the clears
// (compiler/schedule.h); QPU_VALUE_DIM=n sets the GDN heads' value dim. QPU_TOP=n names the
// n families with the most neurons per band; QPU_CRITICAL=1 prints one longest chain of
// ops by family (=2: also every op of it by label); QPU_WAW=1 lists the values with four
// or more writers by their writers' labels (* = exclusive writes, ir.h).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/qwen35_layout.h"
#include "machine/token_machine.h"
#include "npu/tests/unit_harness.h"
#include "runner/cycle_profile.h"
#include "runner/story_stream.h"

namespace {

// stories260K, or QPU_MODEL=path (a llama2.c file), or QPU_RANDOM_MODEL=dim,hidden,layers,
// heads,kv_heads,vocab,seq_len (random weights of binades [-6, -1], fixed seed).
qpu::reference::Llama2Checkpoint nested_model() {
  using namespace qpu;
  if (const char* path = std::getenv("QPU_MODEL")) return reference::load_llama2_checkpoint(path);
  if (const char* spec = std::getenv("QPU_RANDOM_MODEL")) {
    reference::Llama2Config c;
    if (std::sscanf(spec, "%d,%d,%d,%d,%d,%d,%d", &c.dim, &c.hidden_dim, &c.n_layers, &c.n_heads, &c.n_kv_heads,
                    &c.vocab_size, &c.seq_len) != 7)
      fail("QPU_RANDOM_MODEL: '{}' is not dim,hidden,layers,heads,kv_heads,vocab,seq_len", spec);
    reference::validate_llama2_config(c, "QPU_RANDOM_MODEL");
    std::mt19937_64 rng(1);
    return npu::unit_testing::random_checkpoint(c, rng, {&reference::Llama2Layout::rms_ffn});
  }
  return npu::unit_testing::stories260k();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qpu;
  const int positions = argc > 1 ? std::atoi(argv[1]) : 16;
  const int64_t bands = argc > 2 ? std::max(1, std::atoi(argv[2])) : 40;
  machine::TokenMachineOptions options = runner::token_machine_options(positions);
  if (const char* e = std::getenv("QPU_KV_BANKS")) options.kv_banks = std::atoi(e);
  if (const char* e = std::getenv("QPU_LANES")) options.lanes = std::atoi(e);
  if (const char* e = std::getenv("QPU_MAX_NEURONS")) options.limits.max_neurons_per_mlp = std::atoi(e);
  if (const char* e = std::getenv("QPU_MAX_MEMORIES")) options.limits.max_gdn_memories_per_mixer = std::atoi(e);
  if (const char* e = std::getenv("QPU_SEGMENTS")) {  // SUM,WSUM,SLOW blocks per segment
    if (std::sscanf(e, "%d,%d,%d", &options.sum_segment_blocks, &options.wsum_segment_blocks,
                    &options.slow_segment_blocks) != 3)
      fail("QPU_SEGMENTS: '{}' is not sum,wsum,slow blocks", e);
  }
  if (std::getenv("QPU_SLOW_BESIDE")) options.slow_beside_wsum = true;
  if (const char* e = std::getenv("QPU_VALUE_DIM")) options.value_dim = std::atoi(e);
  if (std::getenv("QPU_DEADLINE")) options.limits.by_deadline = true;
  if (const char* e = std::getenv("QPU_CLEAR_ROOM")) options.limits.clear_room = std::atoi(e);
  const machine::TokenMachine m = machine::build_token_machine(nested_model(), options);
  const compiler::Program& program = m.program;
  const compiler::Schedule& schedule = m.compiled.schedule;
  const compiler::Allocation& alloc = m.compiled.allocation;
  const auto& c = m.compiled.weights.config;
  const int64_t layers = alloc.num_layers;
  std::printf("shape: %d positions: layers %lld, hidden %lld, intermediate %lld, GDN heads %lld, vocab %lld: %.2f billion "
              "parameters\n",
              m.max_positions, static_cast<long long>(layers), static_cast<long long>(alloc.hidden_size),
              static_cast<long long>(alloc.intermediate_size), static_cast<long long>(alloc.num_gdn_heads),
              static_cast<long long>(c.vocab_size), static_cast<double>(io::qwen35_parameter_count(c)) / 1e9);

  // Every value the embedding sets needs a dim of its own (compiler/allocate.h): their
  // count is a floor of the hidden size whatever their lives.
  std::printf("token inputs: %zu (the embedding sets each in its own dim)\n", m.interface.inputs.size());
  std::printf("critical path: %lld ops (sublayers %lld: mixers and MLPs alternate)\n",
              static_cast<long long>(compiler::critical_path(program)), static_cast<long long>(schedule.num_sublayers));

  // QPU_CRITICAL=1: the ops of one longest chain (compiler::critical_path's edges: RAW,
  // WAW, explicit orders), counted by micro-op family in chain order.
  if (std::getenv("QPU_CRITICAL")) {
    const auto& ops = program.ops();
    std::vector<int64_t> depth(ops.size(), 0), from(ops.size(), -1);
    std::vector<int64_t> value_op(static_cast<size_t>(program.num_values()), -1);
    std::vector<int64_t> order_op(program.orders().size(), -1);  // deepest `before` op per order
    for (size_t i = 0; i < ops.size(); ++i) {
      auto consider = [&](int64_t j, int64_t gap = 1) {
        if (j >= 0 && depth[static_cast<size_t>(j)] + gap > depth[i]) depth[i] = depth[static_cast<size_t>(j)] + gap, from[i] = j;
      };
      depth[i] = 1;
      for (compiler::ValueId v : ops[i].reads()) consider(value_op[static_cast<size_t>(v)]);
      for (compiler::ValueId v : ops[i].writes()) {  // exclusive writes may share a sublayer
        const int64_t j = value_op[static_cast<size_t>(v)];
        consider(j, j >= 0 && ops[static_cast<size_t>(j)].exclusive_writes && ops[i].exclusive_writes ? 0 : 1);
      }
      for (size_t k = 0; k < program.orders().size(); ++k) {
        const auto& o = program.orders()[k];
        if (i >= o.after.begin && i < o.after.end) consider(order_op[k]);
      }
      for (compiler::ValueId v : ops[i].writes()) value_op[static_cast<size_t>(v)] = static_cast<int64_t>(i);
      for (size_t k = 0; k < program.orders().size(); ++k) {
        const auto& o = program.orders()[k];
        if (i >= o.before.begin && i < o.before.end &&
            (order_op[k] < 0 || depth[static_cast<size_t>(order_op[k])] < depth[i]))
          order_op[k] = static_cast<int64_t>(i);
      }
    }
    int64_t at = std::max_element(depth.begin(), depth.end()) - depth.begin();
    std::vector<std::string> chain;
    for (; at >= 0; at = from[static_cast<size_t>(at)]) {
      std::string f = runner::micro_op_family(ops[static_cast<size_t>(at)].label);
      chain.push_back(f.substr(0, f.find_first_of(" .(")));
    }
    std::reverse(chain.begin(), chain.end());
    if (std::string(std::getenv("QPU_CRITICAL")) == "2") {  // every op of the chain, by label
      std::vector<int64_t> path;
      for (int64_t k = std::max_element(depth.begin(), depth.end()) - depth.begin(); k >= 0; k = from[static_cast<size_t>(k)])
        path.push_back(k);
      std::reverse(path.begin(), path.end());
      for (int64_t k : path) std::printf("  %lld %s\n", static_cast<long long>(k), ops[static_cast<size_t>(k)].label.c_str());
    }
    std::printf("critical chain: %zu ops:", chain.size());
    for (size_t i = 0; i < chain.size();) {
      size_t j = i;
      while (j < chain.size() && chain[j] == chain[i]) ++j;
      std::printf(" %s %zu", chain[i].c_str(), j - i);
      i = j;
    }
    std::printf("\n");
  }

  if (std::getenv("QPU_WAW")) {  // values with many writers: writer labels, exclusive or not
    std::map<std::string, std::pair<int64_t, int64_t>> by_label;  // label -> (values, writers)
    std::vector<std::vector<size_t>> writers(static_cast<size_t>(program.num_values()));
    for (size_t i = 0; i < program.ops().size(); ++i)
      for (compiler::ValueId v : program.ops()[i].writes()) writers[static_cast<size_t>(v)].push_back(i);
    for (size_t v = 0; v < writers.size(); ++v) {
      if (writers[v].size() < 4) continue;
      std::map<std::string, int64_t> labels;
      for (size_t i : writers[v]) labels[program.ops()[i].label + (program.ops()[i].exclusive_writes ? "*" : "")]++;
      std::string key = program.name(static_cast<compiler::ValueId>(v)) + " <-";
      for (auto& [l, n] : labels) key += " " + l + " x" + std::to_string(n);
      by_label[key].first++;
      by_label[key].second += static_cast<int64_t>(writers[v].size());
    }
    for (auto& [k, n] : by_label) std::printf("waw: %lld values, %lld writes: %s\n", static_cast<long long>(n.first), static_cast<long long>(n.second), k.c_str());
  }

  // Live interval per value: first to last access; interface inputs from the embedding.
  const auto& ops = program.ops();
  std::vector<int64_t> first(static_cast<size_t>(program.num_values()), -1), last(first.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i)
    for (const auto& list : {ops[i].reads(), ops[i].writes()})
      for (compiler::ValueId v : list) {
        const auto u = static_cast<size_t>(v);
        if (first[u] < 0 || schedule.sublayer[i] < first[u]) first[u] = schedule.sublayer[i];
        last[u] = std::max(last[u], schedule.sublayer[i]);
      }
  for (compiler::ValueId v : m.interface.inputs)
    if (last[static_cast<size_t>(v)] >= 0) first[static_cast<size_t>(v)] = 0;
  std::vector<int64_t> live(static_cast<size_t>(2 * layers) + 1, 0);
  for (size_t v = 0; v < first.size(); ++v)
    if (first[v] >= 0) ++live[static_cast<size_t>(first[v])], --live[static_cast<size_t>(last[v]) + 1];
  for (size_t s = 1; s < live.size(); ++s) live[s] += live[s - 1];
  live.pop_back();
  std::vector<int64_t> sorted = live;
  std::sort(sorted.begin(), sorted.end());
  std::printf("live dims per sublayer:");
  for (double q : {0.5, 0.9, 0.99, 1.0})
    std::printf(" p%.0f %lld", q * 100,
                static_cast<long long>(sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())))]));
  int64_t neurons = 0;
  for (int64_t n : alloc.neurons_per_layer) neurons += n;
  std::printf("; neurons %lld (%.0f per layer, %.1f %% of the intermediate size)\n", static_cast<long long>(neurons),
              static_cast<double>(neurons) / static_cast<double>(layers),
              100.0 * static_cast<double>(neurons) / static_cast<double>(layers * alloc.intermediate_size));

  // QPU_BIG_OPS=n: the MLP ops of more than n neurons, by label family (what a smaller
  // intermediate size would have to split).
  if (const char* e = std::getenv("QPU_BIG_OPS")) {
    const size_t over = static_cast<size_t>(std::atol(e));
    std::map<std::string, std::pair<int64_t, size_t>> big;  // family: count, widest
    for (const auto& op : ops)
      if (op.kind == compiler::OpKind::Mlp && op.neurons.size() > over) {
        auto& [count, widest] = big[op.label.substr(0, op.label.find_first_of(" .(["))];
        ++count;
        widest = std::max(widest, op.neurons.size());
      }
    for (const auto& [name, cw] : big)
      std::printf("ops over %zu neurons: %-24s %6lld ops, widest %zu\n", over, name.c_str(),
                  static_cast<long long>(cw.first), cw.second);
  }

  // QPU_MEMORIES=1: the GDN memory ops by label (digits collapsed), most first, and how
  // many layers hold any.
  if (std::getenv("QPU_MEMORIES")) {
    std::map<std::string, int64_t> count;
    for (const auto& op : ops)
      if (op.kind == compiler::OpKind::GdnMemory) {
        std::string l;
        for (char ch : op.label) l += std::isdigit(static_cast<unsigned char>(ch)) ? '#' : ch;
        while (l.find("##") != std::string::npos) l.erase(l.find("##"), 1);
        ++count[l];
      }
    std::vector<std::pair<int64_t, std::string>> top;
    for (const auto& [l, n] : count) top.push_back({-n, l});
    std::sort(top.begin(), top.end());
    for (const auto& [n, l] : top) std::printf("GDN memories: %6lld  %s\n", static_cast<long long>(-n), l.c_str());
    std::vector<char> holds(static_cast<size_t>(layers), 0);
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == compiler::OpKind::GdnMemory) holds[static_cast<size_t>(schedule.sublayer[i] / 2)] = 1;
    std::printf("GDN memories: layers holding one: %lld of %lld\n",
                static_cast<long long>(std::count(holds.begin(), holds.end(), 1)), static_cast<long long>(layers));
  }

  const size_t families_shown = std::getenv("QPU_TOP") ? static_cast<size_t>(std::atol(std::getenv("QPU_TOP"))) : 4;
  const int64_t step = std::max<int64_t>(1, (layers + bands - 1) / bands);
  for (int64_t l0 = 0; l0 < layers; l0 += step) {
    const int64_t l1 = std::min(layers, l0 + step);
    int64_t widest = 0, nmax = 0, nsum = 0;
    for (int64_t l = l0; l < l1; ++l) {
      widest = std::max({widest, live[static_cast<size_t>(2 * l)], live[static_cast<size_t>(2 * l + 1)]});
      nmax = std::max(nmax, alloc.neurons_per_layer[static_cast<size_t>(l)]);
      nsum += alloc.neurons_per_layer[static_cast<size_t>(l)];
    }
    std::map<std::string, int64_t> family;
    for (size_t i = 0; i < ops.size(); ++i) {
      const int64_t l = schedule.sublayer[i] / 2;
      if (l < l0 || l >= l1 || ops[i].kind != compiler::OpKind::Mlp) continue;
      std::string f = runner::micro_op_family(ops[i].label);
      family[f.substr(0, f.find_first_of(" .("))] += static_cast<int64_t>(ops[i].neurons.size());
    }
    std::vector<std::pair<int64_t, std::string>> top;
    for (const auto& [name, n] : family) top.push_back({-n, name});
    std::sort(top.begin(), top.end());
    std::string names;
    for (size_t j = 0; j < std::min<size_t>(families_shown, top.size()); ++j) names += " " + top[j].second + ":" + std::to_string(-top[j].first);
    std::printf("layers %5lld-%5lld: widest %5lld, neurons max %5lld mean %5.0f;%s\n", static_cast<long long>(l0),
                static_cast<long long>(l1 - 1), static_cast<long long>(widest), static_cast<long long>(nmax),
                static_cast<double>(nsum) / static_cast<double>(l1 - l0), names.c_str());
  }
  return 0;
}
