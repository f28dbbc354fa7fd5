#include "npu/expf_model.h"

#include <bit>
#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace qpu::npu {

namespace expf_detail {

double inv_ln2n() { return 0x1.71547652b82fep+5; }

double poly_c(int i) {
  static constexpr double c[3] = {0x1.c6af84b912394p-20, 0x1.ebfce50fac4f3p-13, 0x1.62e42ff0c52d6p-6};
  return c[i];
}

double table(int j) {
  static constexpr uint64_t T[32] = {
      0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
      0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
      0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
      0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
      0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
      0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
      0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
  return std::bit_cast<double>(T[j] + (static_cast<uint64_t>(j) << 47));
}

std::vector<int64_t> const_digits(double c, int cmax) {
  // c * 2^(9 cmax) must be an integer below 2^63: then its base-512 digits are exact.
  const double scaled = std::ldexp(c, kDigitBits * cmax);
  if (!(c > 0.0) || scaled >= 0x1p63 || std::floor(scaled) != scaled)
    fail("expf: constant {:a} has no exact base-512 form down to digit {}", c, cmax);
  auto n = static_cast<uint64_t>(scaled);
  std::vector<int64_t> d(static_cast<size_t>(cmax + 1));
  for (int i = cmax; i >= 0; --i) {
    d[static_cast<size_t>(i)] = static_cast<int64_t>(n % kRadix);
    n /= kRadix;
  }
  if (n != 0) fail("expf: constant {:a} above the top digit", c);
  return d;
}

const std::vector<Exception>& exceptions() {
  // The exhaustive run over every float in [-104, 89] (docs/npu-expf.md) finds exactly one
  // input where the bare decomposition's float differs from libm's: exp(x) lies so close to
  // a float rounding boundary that glibc's double roundings (not emulated) decide it.
  static const std::vector<Exception> list = {
      {0x1.e75bc4p-3f, 0x1.44c778p+0f},  // libm 0x1.44c778p+0; the exact-arithmetic value rounds to 0x1.44c776p+0
  };
  return list;
}

}  // namespace expf_detail

namespace {

using namespace expf_detail;

struct Tables {
  std::vector<int64_t> m, c0, c1, c2;
  std::vector<std::vector<int64_t>> t;
};

const Tables& tables() {
  static const Tables tb = [] {
    Tables r;
    r.m = const_digits(inv_ln2n(), 6);
    r.c0 = const_digits(poly_c(0), 9);
    r.c1 = const_digits(poly_c(1), 8);
    r.c2 = const_digits(poly_c(2), 7);
    for (int j = 0; j < 32; ++j) r.t.push_back(const_digits(table(j), 6));
    return r;
  }();
  return tb;
}

constexpr int64_t kBias = int64_t{1} << 21;         // keeps every floor's argument >= 0
constexpr int64_t kCarryBias = kBias / kRadix;      // 2^12
constexpr int64_t kFormLimit = int64_t{1} << 23;    // floor_div_pow2: sum of |terms| below this
constexpr int64_t kSumLimit = int64_t{1} << 24;     // exact integer sums (products, up forms)

inline void check(bool ok, int64_t* viol) {
  if (!ok && viol) ++*viol;
}

// Carry normalisation of columns c = lo..hi (weights 2^(-9c)), the NPU's ripple of
// floor_div_pow2: T_c = col_c + carry, q_c = floor((T_c + 2^21) / 512), carry = q_c - 2^12,
// digit_c = T_c - 512 carry in [0, 512); digit_lo = T_lo (the signed top). sumabs[c] is the
// sum of |terms| of column c's form (the floor's exactness bound).
void normalize(const int64_t* col, const int64_t* sumabs, int lo, int hi, int64_t* digit, int64_t* viol) {
  int64_t carry = 0;
  bool first = true;
  for (int c = hi; c > lo; --c) {
    const int64_t T = col[c] + carry;
    const int64_t F = T + kBias;
    const int64_t form = sumabs[c] + (first ? kBias : std::llabs(carry + kCarryBias) + (kBias - kCarryBias));
    check(F >= 0 && form < kFormLimit, viol);
    const int64_t q = F >> kDigitBits;  // floor (F >= 0)
    carry = q - kCarryBias;
    digit[c] = T - kRadix * carry;
    first = false;
  }
  digit[lo] = col[lo] + carry;
  check(sumabs[lo] + std::llabs(carry) < kFormLimit, viol);
}

// P5 rounding of v to the grid of C = 1.5 * 2^23 * grid: fl(v + C) - C.
inline float round_grid(float v, float C) {
  const float t = v + C;
  return t - C;
}

}  // namespace

ExpfParts expf_model(float x, int64_t* viol, bool use_exceptions) {
  const Tables& tb = tables();
  // 1. Special cases (greater against constants) and the clamp of x to the main path.
  const bool over = x > kOverflowAbove, under = x < kUnderflowBelow;
  const bool keep = !over && !under;
  const float xc = keep ? x : 0.0f;

  // 2. Balanced base-512 digits of xc by P5 rounding on fixed grids: n_a in [-256, 256]
  //    (n_0 = round(xc) in [-104, 89]); the remainder below 2^-55 is dropped (x's ulp is
  //    >= 2^-49 wherever it matters; tiny x gives digits 0 and expf = 1).
  int64_t n[kXDigits];
  float r = xc;
  for (int a = 0; a < kXDigits; ++a) {
    const float C = std::ldexp(1.5f, 23 - kDigitBits * a);
    const float D = round_grid(r, C);
    n[a] = static_cast<int64_t>(std::ldexp(static_cast<double>(D), kDigitBits * a));
    r = r - D;  // exact
  }

  // 3. P = InvLn2N * xc exactly: columns of digit products (constant weights: one linear
  //    form per column), then carry normalisation.
  int64_t col[kPCols] = {}, sa[kPCols] = {}, pd[kPCols];
  for (int a = 0; a < kXDigits; ++a)
    for (int b = 0; b < 7; ++b) {
      const int64_t t = n[a] * tb.m[static_cast<size_t>(b)];
      col[a + b] += t;
      sa[a + b] += std::llabs(t);
    }
  normalize(col, sa, 0, kPCols - 1, pd, viol);
  // k = round(P): P = pd0 + frac with frac in [0, 1) (digits >= 0); frac >= 1/2 iff
  // pd1 >= 256 (never a tie: docs/npu-expf.md). r = P - k, digits rho_1..7.
  const int64_t h = pd[1] >= 256 ? 1 : 0;
  const int64_t K = pd[0] + h;
  int64_t rho[kRDigits + 1] = {};
  rho[1] = pd[1] - kRadix * h;
  for (int c = 2; c <= kRDigits; ++c) rho[c] = pd[c];

  // 4. e = floor(k / 32), j = k mod 32 (floor_div_pow2 on k + 8192 >= 0).
  const int64_t Fe = K + 8192;
  check(Fe >= 0 && Fe < (int64_t{1} << 22), viol);
  const int64_t qe = Fe >> 5;
  const int64_t e = qe - 256;
  const auto j = static_cast<int>(Fe - 32 * qe);

  // 5. r^2 (products of digits; a column is one value, a sum of integer products) and
  //    w = C1 + C0 r (constant weights), both normalised.
  int64_t s[kCols] = {}, w[kCols] = {};
  {
    int64_t pc[kCols] = {}, ps[kCols] = {}, sab[kCols] = {};
    for (int a = 1; a <= kRDigits; ++a)
      for (int b = a; b <= kRDigits; ++b) {
        if (a + b >= kCols) continue;
        const int64_t t = (a == b ? 1 : 2) * rho[a] * rho[b];
        pc[a + b] += t;
        ps[a + b] += std::llabs(t);
      }
    for (int c = 1; c < kCols; ++c) {
      check(ps[c] < kSumLimit, viol);
      sab[c] = std::llabs(pc[c]);
    }
    normalize(pc, sab, 1, kCols - 1, s, viol);
  }
  {
    int64_t wc[kCols] = {}, wsa[kCols] = {};
    for (int c = 2; c <= 8; ++c) {
      wc[c] += tb.c1[static_cast<size_t>(c)];
      wsa[c] += tb.c1[static_cast<size_t>(c)];
    }
    for (int a = 1; a <= kRDigits; ++a)
      for (int b = 3; b <= 9; ++b) {
        if (a + b >= kCols) continue;
        const int64_t t = tb.c0[static_cast<size_t>(b)] * rho[a];
        wc[a + b] += t;
        wsa[a + b] += std::llabs(t);
      }
    normalize(wc, wsa, 2, kCols - 1, w, viol);
  }

  // 6. y = 1 + C2 r + r^2 w (glibc's cubic, evaluated exactly up to truncation at 2^-90).
  int64_t y[kCols];
  {
    int64_t yc[kCols] = {}, ysa[kCols] = {};
    yc[0] = 1;
    ysa[0] = 1;
    for (int a = 1; a <= 10; ++a)
      for (int b = 2; b <= 10; ++b) {
        if (a + b >= kCols) continue;
        const int64_t t = s[a] * w[b];
        yc[a + b] += t;
        ysa[a + b] += std::llabs(t);
      }
    for (int c = 0; c < kCols; ++c) {
      check(ysa[c] < kSumLimit, viol);
      ysa[c] = std::llabs(yc[c]);  // the product column is one value
    }
    for (int a = 1; a <= kRDigits; ++a)
      for (int b = 1; b <= 7; ++b) {
        if (a + b >= kCols) continue;
        const int64_t t = tb.c2[static_cast<size_t>(b)] * rho[a];
        yc[a + b] += t;
        ysa[a + b] += std::llabs(t);
      }
    normalize(yc, ysa, 0, kCols - 1, y, viol);
  }

  // 7. Z = y * T[j] (the one-hot j gates one linear form per column), normalised.
  int64_t z[kCols];
  {
    const auto& T = tb.t[static_cast<size_t>(j)];
    int64_t zc[kCols] = {}, zsa[kCols] = {};
    for (int a = 0; a < kCols; ++a)
      for (int b = 0; b <= 6; ++b) {
        if (a + b >= kCols) continue;
        const int64_t t = y[a] * T[static_cast<size_t>(b)];
        zc[a + b] += t;
        zsa[a + b] += std::llabs(t);
      }
    for (int c = 0; c < kCols; ++c) {
      check(zsa[c] < kSumLimit, viol);
      zsa[c] = std::llabs(zc[c]);
    }
    normalize(zc, zsa, 0, kCols - 1, z, viol);
  }

  // 8. Final rounding of Z * 2^e to float. A (grid 2^-18) + B (grid 2^-37, with a sticky
  //    bit for the digits below 2^-36) is Z truncated with the same roundings at every grid
  //    >= 2^-35. S = fl(A + B) = RN24(Z); E = (A + B) - S exactly (Fast2Sum).
  const int64_t low = z[5] + z[6] + z[7] + z[8] + z[9] + z[10];
  const int64_t sticky = low >= 1 ? 1 : 0;
  const double Ad = static_cast<double>(z[0]) + std::ldexp(static_cast<double>(z[1]), -9) + std::ldexp(static_cast<double>(z[2]), -18);
  const double Bd = std::ldexp(static_cast<double>(z[3]), -27) + std::ldexp(static_cast<double>(z[4]), -36) +
                    std::ldexp(static_cast<double>(sticky), -37);
  const auto A = static_cast<float>(Ad), B = static_cast<float>(Bd);
  check(static_cast<double>(A) == Ad && static_cast<double>(B) == Bd, viol);
  const float S = A + B;
  const float delta = S - A;
  const float E = B - delta;
  // Subnormal results: e in [-150, -126] selects the grid G = 2^(-149 - e); u = RN(S, G)
  // by P5 with C = 2^23 G (S >= 0), and a tie of S on G is resolved by the sign of E.
  float F = S;
  const bool normal = e >= -125 || (e == -126 && S >= 1.0f) || (e == -127 && S >= 2.0f);
  if (!normal) {
    check(e >= -150, viol);  // the NPU's grid selection covers e in [-150, -126]
    const float G = std::ldexp(1.0f, static_cast<int>(-149 - e));
    const float C = std::ldexp(1.0f, static_cast<int>(-126 - e));
    const float u = round_grid(S, C);
    const float d = S - u;  // exact
    const float v = d * std::ldexp(1.0f, static_cast<int>(150 + e));  // d / (G/2): +-1 on a tie
    const bool tie_up = v > 0x1.fffffep-1f, tie_dn = -0x1.fffffep-1f > v;
    const bool up = tie_up && E > 0.0f, dn = tie_dn && 0.0f > E;
    F = u;
    if (up) F = u + G;
    if (dn) F = u - G;
  }
  ExpfParts out;
  out.overflow = over;
  out.mant = keep ? F : 0.0f;
  out.exponent = static_cast<int>(e);
  if (use_exceptions)
    for (const Exception& ex : exceptions())
      if (x == ex.x) out.mant = ex.mant;
  return out;
}

ExpfParts expf_reference_parts(float x) {
  ExpfParts p;
  volatile float xv = x;  // libm at run time: the compiler folds a constant to the correctly rounded value
  const float v = std::exp(xv);
  if (std::isinf(v)) {
    p.overflow = true;
    return p;
  }
  if (x > kOverflowAbove || x < kUnderflowBelow) return p;  // +0 from the slow path
  // glibc's k: round-half-even of the exact product, as its fma does.
  const double kd = std::fma(inv_ln2n(), static_cast<double>(x), 0x1.8p52) - 0x1.8p52;
  const auto k = static_cast<int64_t>(kd);
  p.exponent = static_cast<int>(k >= 0 ? k / 32 : -((-k + 31) / 32));
  p.mant = static_cast<float>(std::ldexp(static_cast<double>(v), -p.exponent));
  return p;
}

float expf_from_parts(const ExpfParts& p) {
  if (p.overflow) return INFINITY;
  return static_cast<float>(std::ldexp(static_cast<double>(p.mant), p.exponent));
}

}  // namespace qpu::npu
