#include "npu/uplink.h"

#include <cmath>

#include "common/error.h"
#include "npu/neurons.h"
#include "npu/primitives.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::Program;
using compiler::ValueId;
using namespace detail;

namespace {

constexpr float kSplit = 65537.0f;  // 2^16 + 1: Veltkamp leaves 24 - 16 = 8 bits in the high part

// Veltkamp: hi = x rounded to 8 significant bits, lo = x - hi exactly (<= 16 bits).
std::array<ValueId, 2> veltkamp(Program& p, ValueId x) {
  const ValueId c = p.value("uplink.c");
  scale_acc(p, c, x, kSplit, "uplink.c");
  const ValueId d = sub(p, c, x, "uplink.d");
  const ValueId hi = sub(p, c, d, "uplink.hi");
  const ValueId lo = sub(p, x, hi, "uplink.lo");
  return {hi, lo};
}

std::array<float, 2> veltkamp_reference(float x) {
  const float c = kSplit * x;
  const float d = c - x;
  const float hi = c - d;
  return {0.0f + hi, 0.0f + (x - hi)};
}

}  // namespace

int64_t ValueVocab::token(float part) const {
  if (part == 0.0f) return first;
  int e = 0;
  const float f = std::frexp(std::fabs(part), &e);  // |part| = f 2^e, f in [0.5, 1)
  const int j = e - 1;
  const float m = std::ldexp(f, 8);
  if (j < jmin || j > jmax || m != std::floor(m)) fail("uplink: {} is not an 8-bit part in binades [{}, {}]", part, jmin, jmax);
  const int64_t index = (int64_t{j - jmin} * 128 + static_cast<int64_t>(m) - 128) * 2 + (part < 0.0f ? 1 : 0);
  return first + 1 + index;
}

float ValueVocab::value(int64_t t) const {
  if (t < first || t >= first + size()) fail("uplink: token {} is not a value token", t);
  if (t == first) return 0.0f;
  const int64_t index = t - first - 1;
  const bool negative = index % 2;
  const int64_t m = 128 + (index / 2) % 128;
  const int j = jmin + static_cast<int>(index / 256);
  const float v = std::ldexp(static_cast<float>(m), j - 7);
  return negative ? -v : v;
}

std::array<ValueId, 3> split_parts(Program& p, ValueId x) {
  const auto [p0, rest] = veltkamp(p, x);
  const auto [p1, p2] = veltkamp(p, rest);
  return {p0, p1, p2};
}

std::array<float, 3> split_parts_reference(float x) {
  const auto [p0, rest] = veltkamp_reference(x);
  const auto [p1, p2] = veltkamp_reference(rest);
  return {p0, p1, p2};
}

EmitFeatures emit_features(Program& p, ValueId c, const ValueVocab& vocab) {
  EmitFeatures f;
  const ValueId zero_value = p.value("uplink.zero_value");  // holds +0
  f.sign = greater(p, zero_value, c);
  // a = |c| 2^16: one live term (gate 128 or 0). The scale keeps every threshold
  // difference below (>= 2^(j + 7)) inside greater's window [2^-70, 2^36].
  constexpr float kUp = 0x1p16f;
  const ValueId a = p.value("uplink.abs");
  p.mlp("uplink.abs", {Neuron{lin({{f.sign, kOn}}), lin({{c, -kUp / kOn}}), {{a, 1.0f}}},
                       Neuron{lin({{kOne, kOn}, {f.sign, -kOn}}), lin({{c, kUp / kOn}}), {{a, 1.0f}}}});
  // t_j = [|c| >= 2^j]: a part has 8 significant bits, so |c| >= 2^j iff
  // |c| > 2^j (1 - 2^-9), and the difference is at least 2^(j-9) either way.
  f.t.push_back(greater(p, a, zero_value));
  for (int j = vocab.jmin + 1; j <= vocab.jmax; ++j)
    f.t.push_back(greater(p, a, constant_value(p, std::ldexp(1.0f - 0x1p-9f, j + 16), "uplink.threshold")));
  // One sublayer on t and s: the mantissa m = |c| 2^(7 - j) for the one binade with
  // t_j - t_(j+1) = 1, the one-hot of (binade, sign) and the zero flag. Every gate is
  // 128 x (an integer in {-1, 0, 1}): silu gives 128, 0 or -0, exactly.
  f.mantissa = p.value("uplink.m");
  f.zero = p.value("uplink.is_zero");
  std::vector<Neuron> n;
  n.push_back(Neuron{lin({{kOne, kOn}, {f.t[0], -kOn}}), lin({{kOne, 1.0f / kOn}}), {{f.zero, 1.0f}}});
  for (int j = vocab.jmin; j <= vocab.jmax; ++j) {
    const auto i = static_cast<size_t>(j - vocab.jmin);
    compiler::Lin onehot = lin({{f.t[i], kOn}});
    if (j < vocab.jmax) onehot.terms.push_back({f.t[i + 1], -kOn});
    n.push_back(Neuron{onehot, lin({{a, std::ldexp(1.0f, 7 - j - 16) / kOn}}), {{f.mantissa, 1.0f}}});
    f.positive.push_back(p.value("uplink.pos"));
    f.negative.push_back(p.value("uplink.neg"));
    compiler::Lin pos = onehot, neg = onehot;
    pos.terms.push_back({f.sign, -kOn});                          // 128 (o_j - s)
    neg.terms.push_back({f.sign, kOn});                           // 128 (o_j + s - 1)
    neg.terms.push_back({kOne, -kOn});
    n.push_back(Neuron{pos, lin({{kOne, 1.0f / kOn}}), {{f.positive.back(), 1.0f}}});
    n.push_back(Neuron{neg, lin({{kOne, 1.0f / kOn}}), {{f.negative.back(), 1.0f}}});
  }
  p.mlp("uplink.features", std::move(n));
  // The mantissa one-hot: [m == k] = (silu(128(d + 1)) - 2 silu(128 d) + silu(128(d - 1)))/128
  // with d = m - k an integer: 1 at d = 0, else 0 (integers below 2^15: any order).
  std::vector<Neuron> hot;
  for (int k = 128; k < 256; ++k) {
    f.mantissa_hot.push_back(p.value("uplink.m_hot"));
    const ValueId h = f.mantissa_hot.back();
    for (auto [shift, down] : {std::pair{1.0f, 1.0f}, std::pair{0.0f, -2.0f}, std::pair{-1.0f, 1.0f}})
      hot.push_back(Neuron{lin({{f.mantissa, kOn}, {kOne, kOn * (shift - static_cast<float>(k))}}),
                           lin({{kOne, 1.0f / kOn}}), {{h, down / kOn}}});
  }
  p.mlp("uplink.m_hot", std::move(hot));
  return f;
}

void install_value_head(io::Qwen35Weights& w, const compiler::Allocation& alloc, const EmitFeatures& f,
                        const ValueVocab& vocab) {
  const int64_t H = w.config.hidden_size, V = w.config.vocab_size;
  if (w.lm_head.empty()) fail("uplink: the checkpoint's LM head is tied to the embedding");
  if (vocab.first < 0 || vocab.first + vocab.size() > V)
    fail("uplink: value tokens [{}, {}) outside the vocabulary of {}", vocab.first, vocab.first + vocab.size(), V);
  if (f.positive.size() != static_cast<size_t>(vocab.jmax - vocab.jmin + 1) || f.mantissa_hot.size() != 128)
    fail("uplink: features for another vocabulary");
  // 2^20 for the right (binade, sign), 2^10 for the right mantissa (whose one-hot value
  // is 2^-7): the right token scores 2^20 + 2^3, every other at most 2^20. Two
  // nonzeros per row, and with
  // one-hot features only two input dims are nonzero on any cycle.
  constexpr float kBinade = 0x1p20f, kMantissa = 0x1p10f;
  auto put = [&](int64_t t, ValueId v, float c) { w.lm_head[static_cast<size_t>(t * H + alloc.dim(v))] = c; };
  for (int64_t t = vocab.first; t < vocab.first + vocab.size(); ++t) {
    std::fill_n(w.lm_head.begin() + t * H, H, 0.0f);
    if (t == vocab.first) {
      put(t, f.zero, kBinade + kMantissa);
      continue;
    }
    const float part = vocab.value(t);
    int e = 0;
    const auto m = static_cast<size_t>(std::ldexp(std::frexp(std::fabs(part), &e), 8));
    const auto i = static_cast<size_t>(e - 1 - vocab.jmin);
    put(t, part < 0.0f ? f.negative[i] : f.positive[i], kBinade);
    put(t, f.mantissa_hot[m - 128], kMantissa);
  }
}

UplinkCheckpoint build_uplink_checkpoint(const std::vector<float>& xs) {
  UplinkCheckpoint u;
  u.vocab = ValueVocab{0, -70, 20};
  Program p;
  const ValueId x = p.value("x");
  u.inbox = p.value("inbox");
  const auto sel = p.values("sel", 3);
  const auto parts = split_parts(p, x);
  // The selected part: one live term (gate 128 on the selected row, 0 elsewhere).
  const ValueId c = p.value("part");
  std::vector<Neuron> pick;
  for (size_t i = 0; i < 3; ++i) pick.push_back(Neuron{lin({{sel[i], kOn}}), lin({{parts[i], 1.0f / kOn}}), {{c, 1.0f}}});
  p.mlp("uplink.pick", std::move(pick));
  const EmitFeatures f = emit_features(p, c, u.vocab);
  compiler::Interface io;
  io.inputs = {x, sel[0], sel[1], sel[2], u.inbox};
  u.first_row = u.vocab.size();
  io.vocab_size = u.first_row + 3 * static_cast<int64_t>(xs.size());
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * 5, 0.0f);
  for (int64_t t = 0; t < u.vocab.size(); ++t) io.input_rows[static_cast<size_t>(t * 5 + 4)] = u.vocab.value(t);
  for (size_t k = 0; k < xs.size(); ++k)
    for (size_t i = 0; i < 3; ++i) {
      float* row = &io.input_rows[(static_cast<size_t>(u.first_row) + 3 * k + i) * 5];
      row[0] = xs[k];
      row[1 + i] = 1.0f;
    }
  u.compiled = compiler::compile(p, io);
  install_value_head(u.compiled.weights, u.compiled.allocation, f, u.vocab);
  return u;
}

}  // namespace qpu::npu
