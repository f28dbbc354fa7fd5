// The expf decomposition of src/npu/expf.cpp as plain C (src/npu/expf_model.cpp: one C
// operation per NPU op, exact integer sums checked against their bounds), compared with
// this machine's libm expf (glibc's __expf_fma) bit for bit: QPU_NPU_CASES * 500 random
// inputs (10M in the default tests) plus dense sweeps around 0, the special-case
// thresholds, the subnormal-result range and the two inputs where glibc's FMA and SSE2
// builds differ. The exhaustive run over every float is DISABLED_ (minutes on 2 cores):
//   nice ./npu_conformance_tests --gtest_also_run_disabled_tests --gtest_filter='*ExpfExhaustive*'
// (QPU_EXPF_ALL=1: all 2^32 bit patterns instead of every float in [-104, 89]).
#include <gtest/gtest.h>


#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <random>
#include <vector>

#include "common/float_bits.h"
#include "npu/expf_model.h"

namespace qpu::npu {
namespace {

// The machine's libm at run time (a constant argument could be folded by the compiler into a
// correctly rounded value, which glibc's expf is not).
float libm_expf(float x) {
  volatile float v = x;
  return std::exp(v);
}

// Same parts, same bits (the NPU delivers +0 for a -0; expf never returns -0).
bool same(const ExpfParts& a, const ExpfParts& b) {
  return a.overflow == b.overflow && a.exponent == b.exponent && float_bits(a.mant) == float_bits(b.mant);
}

struct Checker {
  int64_t cases = 0, mismatches = 0, violations = 0;
  void operator()(float x) {
    ++cases;
    const ExpfParts m = expf_model(x, &violations);
    const ExpfParts r = expf_reference_parts(x);
    // The parts and the float they make must both agree with libm.
    if (!same(m, r) || float_bits(expf_from_parts(m)) != float_bits(libm_expf(x))) {
      if (mismatches++ < 5)
        ADD_FAILURE() << "expf(" << describe_float(x) << "): libm " << describe_float(libm_expf(x)) << " model "
                      << describe_float(expf_from_parts(m)) << " (mant " << describe_float(m.mant) << ", e " << m.exponent
                      << "; expected mant " << describe_float(r.mant) << ", e " << r.exponent << ")";
    }
  }
};

float next_up(float x, int n) {
  for (int i = 0; i < n; ++i) x = std::nextafter(x, INFINITY);
  return x;
}

TEST(ExpfModel, MatchesLibm) {
  Checker check;
  // Dense sweeps: 2^16 consecutive floats around each interesting point.
  const float centres[] = {0.0f,
                           -0.0f,
                           0x1p-26f,
                           -0x1p-26f,
                           0x1p-24f,
                           -0x1p-25f,
                           expf_detail::kOverflowAbove,
                           expf_detail::kUnderflowBelow,
                           -0x1.9d1d9ep+6f,
                           -87.33654f,  // ln(2^-126): the subnormal edge
                           -88.0f,
                           88.0f,
                           -95.0f,
                           -103.0f,
                           0x1.04845ep+5f,
                           -0x1.f8cbb2p+5f,
                           0.5f * 0.0150216f,  // r near +-1/2 for small k
                           1.0f,
                           -1.0f};
  std::vector<float> sweeps(std::begin(centres), std::end(centres));
  for (const auto& ex : expf_detail::exceptions()) sweeps.push_back(ex.x);  // and the exception list's neighbours
  const int width = QPU_NPU_CASES >= 20000 ? 65536 : 1024;  // the sanitizer-sized build sweeps less
  for (float c : sweeps) {
    float x = c;
    for (int i = 0; i < width / 2; ++i) x = std::nextafter(x, -INFINITY);
    for (int i = 0; i < width; ++i, x = std::nextafter(x, INFINITY)) check(x);
  }
  check(next_up(expf_detail::kOverflowAbove, 1));
  std::mt19937_64 rng(2024);
  const int64_t n = int64_t{QPU_NPU_CASES} * 500;
  for (int64_t i = 0; i < n; ++i) {
    float x;
    switch (i % 4) {
      case 0: x = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, static_cast<int>(rng() % 34) - 27); break;
      case 1: x = -static_cast<float>(rng() % 104000000) * 1e-6f; break;  // softmax: x - max <= 0
      case 2: x = float_from_bits(static_cast<uint32_t>(rng())); break;   // any pattern
      default: x = -87.33f - static_cast<float>(rng() % 16700000) * 1e-6f; break;  // subnormal results
    }
    if (!std::isfinite(x)) continue;
    if (rng() & 1) x = std::fabs(x) <= 104.0f ? x : -x;
    check(x);
  }
  EXPECT_EQ(check.mismatches, 0);
  EXPECT_EQ(check.violations, 0);
  EXPECT_GT(check.cases, n / 2);
}

// Each entry of the exception list is an input where the bare decomposition differs from
// libm, and the list's value is libm's.
TEST(ExpfModel, ExceptionListIsExactlyNeeded) {
  for (const auto& ex : expf_detail::exceptions()) {
    const ExpfParts bare = expf_model(ex.x, nullptr, false), fixed = expf_model(ex.x);
    EXPECT_NE(float_bits(expf_from_parts(bare)), float_bits(libm_expf(ex.x))) << describe_float(ex.x);
    EXPECT_EQ(float_bits(expf_from_parts(fixed)), float_bits(libm_expf(ex.x))) << describe_float(ex.x);
    EXPECT_TRUE(same(fixed, expf_reference_parts(ex.x))) << describe_float(ex.x);
  }
}

// Every float in [-104, 89] (or, with QPU_EXPF_ALL=1, every finite bit pattern).
TEST(ExpfModel, DISABLED_ExpfExhaustive) {
  const bool all = std::getenv("QPU_EXPF_ALL") != nullptr;
  std::atomic<int64_t> cases{0}, mismatches{0}, violations{0};
  std::mutex mu;
  std::vector<float> bad;
  const int64_t total = int64_t{1} << 32;
#pragma omp parallel for schedule(dynamic, 1 << 20)
  for (int64_t i = 0; i < total; ++i) {
    const float x = float_from_bits(static_cast<uint32_t>(i));
    if (!std::isfinite(x)) continue;
    if (!all && !(x >= -104.0f && x <= 89.0f)) continue;
    int64_t v = 0;
    const ExpfParts m = expf_model(x, &v);
    const ExpfParts r = expf_reference_parts(x);
    cases.fetch_add(1, std::memory_order_relaxed);
    if (v) violations.fetch_add(v, std::memory_order_relaxed);
    if (!same(m, r) || float_bits(expf_from_parts(m)) != float_bits(libm_expf(x))) {
      mismatches.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mu);
      bad.push_back(x);
    }
  }
  std::sort(bad.begin(), bad.end());
  for (float x : bad)
    std::printf("mismatch {%a, %a}  // libm %a, e %d\n", static_cast<double>(x),
                static_cast<double>(expf_reference_parts(x).mant), static_cast<double>(libm_expf(x)),
                expf_reference_parts(x).exponent);
  std::printf("expf exhaustive (%s): %lld cases, %lld mismatches, %lld bound violations\n", all ? "all patterns" : "[-104, 89]",
              static_cast<long long>(cases.load()), static_cast<long long>(mismatches.load()),
              static_cast<long long>(violations.load()));
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(violations.load(), 0);
}

}  // namespace
}  // namespace qpu::npu
