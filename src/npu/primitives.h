#pragma once
// The NPU's exact primitives, as IR builders. Each appends ops to a Program and
// commits exactly the rounding(s) C commits. Every result is delivered through a
// residual add onto a value that holds +0, so a C result of -0 arrives as +0
// (docs/npu.md: sign of zero). Windows (k = 48, the default norm exponent): every
// residual value must be 0 or have magnitude in [2^-78, 2^36]; extra limits below.
#include <vector>

#include "compiler/ir.h"

namespace qpu::npu {

using compiler::Program;
using compiler::ValueId;

// dst += fl(a * b) — one MLP sublayer, 2 neurons (exactness-toolkit P3 with S = 2^64 in
// the gate). Window: |a| >= 2^-57 and fl(a*b) normal and < 2^64 (0 allowed); a product
// that later ops read must also lie in the value window.
void mul_acc(Program& p, ValueId dst, ValueId a, ValueId b, const char* label = "mul");

// dst += fl(w * a) for a compile-time constant w — one sublayer, 1 neuron (gate is the
// constant 128 = silu(128); up carries w * a / 128). Window: |w * a| >= 2^-119 or 0.
void scale_acc(Program& p, ValueId dst, ValueId a, float w, const char* label = "scale");

// dst += c (a constant) — one sublayer, 1 neuron.
void const_acc(Program& p, ValueId dst, float c, const char* label = "const");

// r = fl(a + b) into a fresh value — one sublayer, 2 neurons (the down projection's
// two-term sum is the one rounding; the residual add onto +0 is exact).
ValueId add(Program& p, ValueId a, ValueId b, const char* label = "add");
ValueId sub(Program& p, ValueId a, ValueId b, const char* label = "sub");

// val = 0; for j: val += w[j] * x[j] — n sublayers, all lanes in parallel.
ValueId dot_const(Program& p, const std::vector<float>& w, const std::vector<ValueId>& x);
ValueId dot_var(Program& p, const std::vector<ValueId>& w, const std::vector<ValueId>& x);

// fl(fl(x + 1.5*2^23) - 1.5*2^23): round half to even to an integer, |x| < 2^22 —
// two sublayers, 3 neurons.
ValueId round_to_int(Program& p, ValueId x);

// Veltkamp split of x into hi (12 significant bits) + lo (exact remainder, <= 12 bits):
// the integer-field form stored in memories with relative read error. 4 sublayers.
// Window: |x| * 4097 inside the value window.
struct Split { ValueId hi, lo; };
Split split12(Program& p, ValueId x);

// Integer 0 <= v < 2^n -> its n bits (exactly 0/1), most significant first decided
// first — n sublayers, 2 neurons each (exactness-toolkit P6).
std::vector<ValueId> int_to_bits(Program& p, ValueId v, int n);

// The range greater may assume for d = fl(a - b): d == 0 or |d| in [2^lo, 2^hi]. The
// default is the whole window a scale set can hold; a caller that can prove a narrower
// range passes it and gets fewer scales (ceil((hi + 1 - lo) / 23)), i.e. fewer values
// live across greater's sublayers. A d outside the window gets an unspecified bit.
struct GreaterWindow {
  int lo = -70;  // >= -70: the first gate weight 2^(9 - lo) must stay <= 2^79
  int hi = 36;   // <= 36: the value window
};

// [a > b] as exactly 0 or 1 — 4 sublayers, 4 + 4n neurons for n = ceil((hi + 1 - lo) / 23)
// scales (the default window: 5 scales, 24 neurons). Window: a == b or |fl(a - b)| in
// [2^lo, 2^hi]; qpu::Error for a window it cannot hold (lo < -70, hi > 36, lo > hi).
// Every value it writes is +-0 or in the value window (no silu tail survives: the scales
// snap onto a preloaded 2^16), so the dead-value clears of its intermediates are exact.
ValueId greater(Program& p, ValueId a, ValueId b, GreaterWindow window = {});
// The number of scales greater uses for `window` (qpu::Error as greater for a bad one).
int greater_scales(GreaterWindow window);
// A value holding the constant c (one MLP sublayer, one neuron).
ValueId constant_value(Program& p, float c, const char* label = "const");

// The window of d = fl(x - c) or fl(c - x) for a constant c and ANY float x with |x| <=
// 2^36 (2 - 2^-23) (the value window's top): {k - 24, 36} with 2^k <= |c| < 2^(k+1), for
// 2^-46 <= |c| < 2^12; the default window for any other c. 3 scales for 2^-8 <= |c| < 2^12.
GreaterWindow constant_window(float c);

// bit ? a : b for bit exactly 0/1 — one sublayer, 2 neurons per selected value.
ValueId select(Program& p, ValueId bit, ValueId a, ValueId b, const char* label = "select");

// run.c's `if (x > m) m = x;` as one step: returns the new m — 5 sublayers.
ValueId max_step(Program& p, ValueId m, ValueId x);

// Argmax with run.c's tie rule (first maximum wins) over values with indices, as a
// pairwise tree (associative under that rule): returns {max, index}. 5 sublayers per level.
struct ArgMax { ValueId max, index; };
ArgMax argmax(Program& p, const std::vector<ValueId>& x);

// floor(F / 2^m) for an integer linear form F (terms in value units, kOne for constants)
// with 0 <= F < 2^22 whose partial sums, in units of 2^-(m+8), stay below 2^24 in
// magnitude whatever the order — 2 sublayers, 3 neurons (P5 on a tie-free offset).
ValueId floor_div_pow2(Program& p, const compiler::Lin& F, int m, const char* label = "floor");

// a XOR b for bits exactly 0/1 — one sublayer, 2 neurons:
// s = a + b, xor = silu(128 s)/128 - 2 silu(128(s - 1))/128.
ValueId bit_xor(Program& p, ValueId a, ValueId b);

// One step of run.c's xorshift64* on a 64-bit state held as 64 bit values (bit i has
// weight 2^i, least significant first): s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
// u32 = (s * 0x2545F4914F6CDD1D) >> 32; coin = (u32 >> 8) / 16777216.0f.
// The product's bits 32..63 come from byte columns (integer linear forms of the state
// bits, < 2^22) and a ripple of 8 exact floors. 21 sublayers.
struct XorShiftOutput {
  ValueId u32_lo, u32_hi;  // u32 & 0xffff, u32 >> 16 (exact integers)
  ValueId coin;            // (u32 >> 8) / 2^24, exactly C's float
};
struct XorShiftStep : XorShiftOutput {
  std::vector<ValueId> state;  // the new state, 64 bits
};
XorShiftStep xorshift64star(Program& p, const std::vector<ValueId>& state_bits);

// The output half of the step alone, on an already advanced state (64 bit values, LSB
// first): u32 = (s * 0x2545F4914F6CDD1D) >> 32 and the coin. 18 sublayers (the 8-floor
// carry ripple, the bytes, the combine). Shared with npu/rng_draw.h, whose state comes
// from a GF(2) jump instead of one step.
XorShiftOutput xorshift_output(Program& p, const std::vector<ValueId>& state_bits);

}  // namespace qpu::npu
