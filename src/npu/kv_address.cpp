#include "npu/kv_address.h"

#include <bit>
#include <cmath>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"
#include "npu/table_lookup.h"

namespace qpu::npu {

using namespace detail;

namespace {

constexpr int kMaxPositionsLog2 = 16;  // gates 128 (pe + 1) stay exact integers < 2^24

// K (v - c): the constant term only when c != 0 (a zero-weight rail term is dead weight).
Lin shifted(ValueId v, float c) {
  Lin g = lin({{v, kOn}});
  if (c != 0.0f) g.terms.push_back({kOne, -kOn * c});
  return g;
}

void check_value(const compiler::Program& p, ValueId v, const char* what) {
  if (v < 0 || v >= p.num_values()) fail("kv_address: {} is not a value of the program (id {})", what, v);
}

}  // namespace

int kv_row_bits(int banks, int64_t positions) {
  int row_bits = 0;
  while ((int64_t{banks} << row_bits) < positions) ++row_bits;
  return row_bits;
}

KvAddress kv_address(compiler::Program& p, ValueId pos, ValueId enable, int banks, int row_bits) {
  check_value(p, pos, "pos");
  check_value(p, enable, "enable");
  if (pos == enable) fail("kv_address: pos and enable are the same value ('{}')", p.name(pos));
  if (banks < 1 || !std::has_single_bit(static_cast<unsigned>(banks)))
    fail("kv_address: banks = {} is not a power of two >= 1", banks);
  if (row_bits < 0) fail("kv_address: row_bits = {} is negative", row_bits);
  if (std::countr_zero(static_cast<unsigned>(banks)) + row_bits > kMaxPositionsLog2)
    fail("kv_address: banks * 2^row_bits = {} * 2^{} exceeds 2^{} positions", banks, row_bits, kMaxPositionsLog2);

  KvAddress a;
  a.first_op = p.ops().size();
  // 1. pe = enable * pos: silu(128) = 128 exactly, silu(0) = 0, so the product is pos or
  //    +-0 and the idle contract holds whatever pos holds (no constant to replace here).
  const ValueId pe = p.value("kv.pos");
  p.mlp("kv.gate", {Neuron{lin({{enable, kOn}}), lin({{pos, 1.0f / kOn}}), {{pe, 1.0f}}}});

  // 2. Row bits, most significant first: step(r >= t) = (silu(K(r - t + 1)) - silu(K(r -
  //    t))) / K for integer r (both gates 0, <= -K or >= K, where silu is exact).
  const float B = static_cast<float>(banks);
  a.row_bits.resize(static_cast<size_t>(row_bits));
  for (int j = row_bits - 1; j >= 0; --j) {
    const float t = B * std::ldexp(1.0f, j);
    const ValueId b = p.value("kv.row" + std::to_string(j));
    p.mlp("kv.row_step", {Neuron{shifted(pe, t - 1.0f), lin({{kOne, 1.0f}}), {{b, 1.0f / kOn}, {pe, -t / kOn}}},
                          Neuron{shifted(pe, t), lin({{kOne, 1.0f}}), {{b, -1.0f / kOn}, {pe, t / kOn}}}});
    a.row_bits[static_cast<size_t>(j)] = b;
  }

  // 3. pe = pos mod B now. bank[k] = r_(k-1) - 2 r_k + r_(k+1), r_j = max(pe - j, 0): the
  //    r_j neurons write straight into the bank values (r_B keeps the one-hot all zero
  //    for pe >= B, i.e. pos past the last row).
  a.bank = p.values("kv.bank", banks);
  one_hot_into(p, pe, a.bank, "kv.bank");

  compiler::enable_constants(p, a.first_op, enable);
  return a;
}

}  // namespace qpu::npu
