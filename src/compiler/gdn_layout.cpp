#include "compiler/gdn_layout.h"

#include <bit>
#include <cmath>

#include "common/error.h"

namespace qpu::compiler {

namespace {

// 0 for a power of 4, 1 for twice a power of 4, -1 otherwise.
int shape_class(int64_t n) {
  if (n < 16 || !std::has_single_bit(static_cast<uint64_t>(n))) return -1;
  return std::countr_zero(static_cast<uint64_t>(n)) % 2;
}

}  // namespace

GdnLayout GdnLayout::for_dims(int64_t key_dim, int64_t value_dim) {
  const int kc = shape_class(key_dim), vc = shape_class(value_dim);
  if (kc < 0 || vc < 0)
    fail("GDN memory: head dims {} x {} must each be a power of 4 or twice one (>= 16)", key_dim, value_dim);
  GdnLayout g;
  g.key_dim = key_dim;
  g.value_dim = value_dim;
  g.two_hot = kc == 1;
  g.rails = vc == 1 ? 2 : 1;
  // One-hot: l2norm gives 1, / sqrt(dk) = 2^-(log2 dk / 2). Two-hot: 2^-1/2 / sqrt(dk).
  const int log_dk = std::countr_zero(static_cast<uint64_t>(key_dim));
  g.read_scale = std::ldexp(1.0f, -(log_dk + kc) / 2);
  // rails * (rail_cell * read_scale)^2 == dv * 4^m: rail_cell * read_scale = sqrt(dv / rails) * 2^m.
  const int log_dv_per_rail = std::countr_zero(static_cast<uint64_t>(value_dim / g.rails));
  g.rail_cell = std::ldexp(1.0f, log_dv_per_rail / 2 + g.norm_exponent) / g.read_scale;
  return g;
}

}  // namespace qpu::compiler
