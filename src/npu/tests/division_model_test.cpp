// The division and sqrt algorithms of src/npu/divide.cpp as plain C float operations,
// one C operation per NPU op (each primitive commits exactly that rounding, which the
// engine suite checks), run over many more cases than the engine can afford: evidence
// that the algorithm itself (Newton start, faithful refinement, exact residuals, the
// midpoint decision) is right everywhere in its window. The engine suite checks the
// encoding. Built with -ffp-contract=off like the whole project.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/float_bits.h"

namespace qpu::npu {
namespace {

float rand_in(std::mt19937_64& rng, int emin, int emax) {
  const int e = emin + static_cast<int>(rng() % static_cast<uint64_t>(emax - emin + 1));
  return std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, e);
}

// (a - q*b) * 2^24 rounded once to float: q*b is exact in double (48 bits) and a - q*b is
// exact too (Sterbenz), as the NPU's Dekker chain computes it.
float residual(float a, float q, float b) {
  return static_cast<float>((static_cast<double>(a) - static_cast<double>(q) * static_cast<double>(b)) * 0x1p24);
}

float model_divide(float a, float b) {
  int j = -12;
  while (j + 1 < 12 && b >= std::ldexp(1.0f, j + 1)) ++j;
  float y = static_cast<float>(24.0 / 17.0 * std::ldexp(1.0, -j)) + b * static_cast<float>(-8.0 / 17.0 * std::ldexp(1.0, -2 * j));
  for (int it = 0; it < 3; ++it) y = y * (2.0f - b * y);
  const float q0 = y * a;
  const float q1 = q0 + (y * residual(a, q0, b)) * 0x1p-24f;
  const float r = residual(a, q1, b);
  const float g = q1 * 0x1.000002p-24f, A = q1 + g, T = q1 - g;
  const float DA = 2.0f * r - (b * (A - q1)) * 0x1p24f, DT = 2.0f * r - (b * (T - q1)) * 0x1p24f;
  const bool sq = q1 > 0.0f;
  if ((DA > 0.0f) == sq) return A;
  if ((DT > 0.0f) != sq) return T;
  return q1;
}

float model_sqrt(float x) {
  int j = -18;
  while (j + 1 < 12 && x >= std::ldexp(1.0f, j + 1)) ++j;
  const double c1 = 1.0 - std::sqrt(0.5), m = std::cbrt(1.0 / (4.0 * c1 * c1));
  const double c0 = 1.0 + c1 - (1.0 - c1 * (m - 1.0) - 1.0 / std::sqrt(m)) / 2.0;
  float y = static_cast<float>(c0 * std::pow(2.0, -0.5 * j)) + x * static_cast<float>(-c1 * std::pow(2.0, -1.5 * j));
  for (int it = 0; it < 3; ++it) y = ((-0.5f) * ((x * y) * y) + 1.5f) * y;
  const float s0 = y * x;
  const float s1 = s0 + (y * residual(x, s0, s0)) * (0.5f * 0x1p-24f);
  const float r = residual(x, s1, s1);
  const float g = s1 * 0x1.000002p-24f, A = s1 + g, T = s1 - g;
  if (r - (s1 * (A - s1)) * 0x1p24f > 0.0f) return A;
  if (!(r - (s1 * (T - s1)) * 0x1p24f > 0.0f)) return T;
  return s1;
}

TEST(DivisionModel, MatchesCDivisionInItsWindow) {
  std::mt19937_64 rng(5);
  int64_t mismatches = 0;
  const int64_t n = int64_t{QPU_NPU_CASES} * 500;
  for (int64_t i = 0; i < n; ++i) {
    const float b = rand_in(rng, -12, 11);
    float a = rand_in(rng, -40, 11);
    if (i % 4 == 1) a = std::nextafter(std::fmin(rand_in(rng, -20, 8) * b, 0x1p12f), 0.0f);  // near exact quotients
    if (rng() & 1) a = -a;
    if (float_bits(model_divide(a, b)) != float_bits(a / b) && mismatches++ < 3)
      ADD_FAILURE() << describe_float(a) << " / " << describe_float(b);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(SqrtModel, MatchesSqrtfInItsWindow) {
  std::mt19937_64 rng(6);
  int64_t mismatches = 0;
  const int64_t n = int64_t{QPU_NPU_CASES} * 500;
  for (int64_t i = 0; i < n; ++i) {
    float x = rand_in(rng, -18, 11);
    if (i % 4 == 1) {
      const float s = rand_in(rng, -9, 5);
      x = std::fmax(std::nextafter(s * s, (rng() & 1) ? 1e30f : 0.0f), 0x1p-18f);
    }
    if (float_bits(model_sqrt(x)) != float_bits(std::sqrt(x)) && mismatches++ < 3)
      ADD_FAILURE() << "sqrt " << describe_float(x);
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace qpu::npu
