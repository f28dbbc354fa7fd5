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
