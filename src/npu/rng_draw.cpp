#include "npu/rng_draw.h"

#include <bit>
#include <map>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"
#include "npu/primitives.h"

namespace qpu::npu {

using namespace detail;

namespace {

constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: floor_div_pow2's rounding constant
constexpr int kLimbBits = 16;
constexpr int kMaxDrawsLog2 = 20;

// An integer linear form of the values, one term per value (the weights of repeated
// values added: integers, exact).
using Form = std::map<ValueId, float>;

Lin to_lin(const Form& f, float scale, float constant) {
  Lin l;
  for (const auto& [v, w] : f)
    if (w != 0.0f) l.terms.push_back({v, w * scale});
  if (constant != 0.0f) l.terms.push_back({kOne, constant});
  return l;
}

void add_to(Form& dst, const Form& src, float w) {
  for (const auto& [v, x] : src) dst[v] += w * x;
}

// floor(v / 2^k) - 2 floor(v / 2^(k+1)) = bit k of v, with floors[k] = floor(v / 2^k)
// (kOne = a floor known to be 0).
Form bit_form(const std::vector<ValueId>& floors, size_t k) {
  Form f;
  f[floors[k]] += 1.0f;
  if (k + 1 < floors.size() && floors[k + 1] != kOne) f[floors[k + 1]] -= 2.0f;
  return f;
}

void check_value(const compiler::Program& p, ValueId v, const char* what) {
  if (v < 0 || v >= p.num_values()) fail("rng_draw: {} is not a value of the program (id {})", what, v);
}

}  // namespace

uint64_t gf2_apply(const Gf2Matrix& m, uint64_t s) {
  uint64_t r = 0;
  for (int i = 0; i < 64; ++i) r |= static_cast<uint64_t>(std::popcount(m[static_cast<size_t>(i)] & s) & 1) << i;
  return r;
}

Gf2Matrix gf2_multiply(const Gf2Matrix& a, const Gf2Matrix& b) {
  // Row i of a b: the xor of b's rows j for the set bits j of a's row i.
  Gf2Matrix r{};
  for (size_t i = 0; i < 64; ++i)
    for (size_t j = 0; j < 64; ++j)
      if ((a[i] >> j) & 1u) r[i] ^= b[j];
  return r;
}

Gf2Matrix xorshift_matrix() {
  Gf2Matrix m{};
  for (int j = 0; j < 64; ++j) {
    uint64_t s = uint64_t{1} << j;
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    for (int i = 0; i < 64; ++i)
      if ((s >> i) & 1u) m[static_cast<size_t>(i)] |= uint64_t{1} << j;
  }
  return m;
}

std::vector<Gf2Matrix> xorshift_jump_powers(int count) {
  std::vector<Gf2Matrix> powers;
  Gf2Matrix m = xorshift_matrix();
  for (int k = 0; k < count; ++k) {
    powers.push_back(m);
    m = gf2_multiply(m, m);
  }
  return powers;
}

RngDraw rng_draw(compiler::Program& p, const std::array<ValueId, 4>& seed_limbs, ValueId draw, int max_draws,
                 ValueId enable) {
  const char* limb_names[4] = {"seed limb 0", "seed limb 1", "seed limb 2", "seed limb 3"};
  std::vector<ValueId> inputs;
  for (size_t j = 0; j < 4; ++j) {
    check_value(p, seed_limbs[j], limb_names[j]);
    inputs.push_back(seed_limbs[j]);
  }
  check_value(p, draw, "draw");
  check_value(p, enable, "enable");
  inputs.push_back(draw);
  inputs.push_back(enable);
  for (size_t a = 0; a < inputs.size(); ++a)
    for (size_t b = a + 1; b < inputs.size(); ++b)
      if (inputs[a] == inputs[b]) fail("rng_draw: two inputs are the same value ('{}')", p.name(inputs[a]));
  if (max_draws < 1 || max_draws > (1 << kMaxDrawsLog2))
    fail("rng_draw: max_draws = {} is outside [1, 2^{}]", max_draws, kMaxDrawsLog2);

  RngDraw out;
  out.first_op = p.ops().size();
  out.jumps = std::bit_width(static_cast<unsigned>(max_draws));
  const auto K = static_cast<size_t>(out.jumps);

  // 1. Floors, all independent: the limbs' (q_j0 = the limb itself: it is only read by
  //    the first jump's ups, whose neurons are gated by the bits of n) and n's (r_0 too,
  //    so that every gate of the jumps is +-0 when idle whatever n holds; r_K for n mod
  //    2^K).
  std::vector<Form> state(64);
  for (size_t j = 0; j < 4; ++j) {
    std::vector<ValueId> q{seed_limbs[j]};
    for (int k = 1; k < kLimbBits; ++k)
      q.push_back(floor_div_pow2(p, Lin{{{seed_limbs[j], 1.0f}}}, k, "rng.seed_floor"));
    for (size_t k = 0; k < kLimbBits; ++k) state[kLimbBits * j + k] = bit_form(q, k);
  }
  std::vector<ValueId> r;
  for (size_t k = 0; k <= K; ++k) r.push_back(floor_div_pow2(p, Lin{{{draw, 1.0f}}}, static_cast<int>(k), "rng.n_floor"));

  // 2. The conditional jumps, most significant bit first.
  const std::vector<Gf2Matrix> powers = xorshift_jump_powers(out.jumps);
  for (size_t step = 0; step < K; ++step) {
    const size_t k = K - 1 - step;
    const Form bit = bit_form(r, k);
    const Lin on = to_lin(bit, kOn, 0.0f);        // 128 b
    const Lin off = to_lin(bit, -kOn, kOn);       // 128 (1 - b)
    const Gf2Matrix& A = powers[k];
    const auto t = p.values("rng.t" + std::to_string(k) + ".", 64);
    const auto v = p.values("rng.s" + std::to_string(k) + ".", 64);
    std::vector<Neuron> select;
    Neuron constant{lin({{kOne, kOn}}), lin({{kOne, 1.0f / kOn}}), {}};  // outputs exactly 1
    for (size_t i = 0; i < 64; ++i) {
      Form row;
      for (size_t j = 0; j < 64; ++j)
        if ((A[i] >> j) & 1u) add_to(row, state[j], 1.0f);
      // Either branch: up = (S/2 - 1/4) / 128, so the neuron that is on writes y = S/2 - 1/4
      // (exact: S <= 64 and the seed forms' partial sums stay far below 2^24 units).
      select.push_back(Neuron{on, to_lin(row, 0.5f / kOn, -0.25f / kOn), {{t[i], 1.0f}, {v[i], 2.0f}}});
      select.push_back(Neuron{off, to_lin(state[i], 0.5f / kOn, -0.25f / kOn), {{t[i], 1.0f}, {v[i], 2.0f}}});
      constant.down.push_back({t[i], kRound});
      constant.down.push_back({v[i], 0.5f});
    }
    select.push_back(std::move(constant));
    p.mlp("rng.jump", std::move(select));
    // t = 1.5 2^23 + floor(S/2), v = S: v += 2 (1.5 2^23) - 2 t = -2 floor(S/2), exactly.
    std::vector<Neuron> parity;
    for (size_t i = 0; i < 64; ++i)
      parity.push_back(Neuron{lin({{kOne, kOn}}), lin({{t[i], -2.0f / kOn}, {kOne, 2.0f * kRound / kOn}}), {{v[i], 1.0f}}});
    p.mlp("rng.parity", std::move(parity));
    for (size_t i = 0; i < 64; ++i) state[i] = Form{{v[i], 1.0f}};
  }

  // 3. The output half of xorshift64* on the jumped state (K >= 1, so the bits are values).
  for (const Form& f : state) out.state.push_back(f.begin()->first);
  const XorShiftOutput o = xorshift_output(p, out.state);
  out.u32_lo = o.u32_lo;
  out.u32_hi = o.u32_hi;
  out.coin = o.coin;

  compiler::enable_constants(p, out.first_op, enable);
  return out;
}

}  // namespace qpu::npu
