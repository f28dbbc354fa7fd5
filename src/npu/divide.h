#pragma once
// Correctly rounded float division and square root. Division: a / b (round to nearest even, as C's `/`), built from
// the exact primitives: a reciprocal estimate from b's binade, Newton steps, one
// refinement with an exact residual, and a final choice among the faithful quotient and
// its two neighbours decided by the exact sign of a - b * midpoint (docs/npu.md).
#include "npu/primitives.h"

namespace qpu::npu {

// Window: b in [2^bmin, 2^bmax) (positive: every divisor in run.c is), a = 0 or
// |a| in [2^-40, 2^12]. Requires -12 <= bmin < bmax <= 12.
struct DivWindow {
  int bmin = -12;
  int bmax = 12;
};

// fl(a / b) into a fresh value (+0 for a = +-0).
ValueId divide(Program& p, ValueId a, ValueId b, const DivWindow& window = {});

// A reciprocal estimate y of b with |1 - b y| <~ 2^-22 (binade of b, then three Newton
// steps): the part of divide that depends on b alone. 11 MLP sublayers, ~520 neurons.
ValueId reciprocal(Program& p, ValueId b, const DivWindow& window = {});

// fl(a / b) given such an estimate y (or any y with |1 - b y| <= 2^-21): the part of
// divide that depends on a. 26 MLP sublayers, ~145-155 neurons per dividend.
ValueId divide_by(Program& p, ValueId a, ValueId b, ValueId y);

// fl(a_i / b) for many dividends sharing one divisor (softmax's x[i] / sum): one
// reciprocal, then divide_by per dividend.
std::vector<ValueId> divide_shared(Program& p, const std::vector<ValueId>& a, ValueId b, const DivWindow& window = {});

// fl(a / c) for a compile-time constant c in [2^-12, 2^12) (run.c's score / sqrtf(8)):
// y = fl(1/c) is exact enough, so there is no reciprocal stage: 26 MLP sublayers and
// 144 neurons instead of divide's 37 and 665 (measured by `qpu primitives`).
ValueId divide_const(Program& p, ValueId a, float c);

// R * 2^24 where R = a - q*b exactly, for q a faithful rounding of a/b (then R is a
// float: Boldo-Daumas), or fl((a - q*b) * 2^24) with one rounding for any q within a few
// ulps (Dekker's exact product, Sterbenz's exact subtraction). Same windows as divide.
ValueId scaled_residual(Program& p, ValueId a, ValueId q, ValueId b);

// Correctly rounded sqrtf(x) into a fresh value, x in [2^xmin, 2^xmax) (positive; run.c's
// rmsnorm takes sqrtf of ss/n + 1e-5 > 0). Same scheme: a reciprocal square root from
// x's binade, Newton steps, one refinement with an exact residual x - s^2, then the
// exact sign of x - midpoint^2 picks s or a neighbour. Requires -18 <= xmin < xmax <= 12.
struct SqrtWindow {
  int xmin = -18;
  int xmax = 12;
};
ValueId sqrt_rn(Program& p, ValueId x, const SqrtWindow& window = {});

}  // namespace qpu::npu
