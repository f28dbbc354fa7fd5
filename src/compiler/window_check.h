#pragma once
// The builders' contract, checked on a real run (docs/npu.md, "The compiler core"): what
// an op reads is +-0 or inside the value window of emit.h, |x| in [2^(k-126), 2^(k-12)],
// and a value starts on a dim that holds exactly +0. Every exactness proof of the units
// and of the dead-value clears (clear_dead.h) rests on these two facts; a value below
// the window reaches the projections as a rounded subnormal, so even its clear is
// inexact and leaves a residue in the dim for the dim's next occupant.
//
// Fed with the residual stream before every sublayer (engine::SublayerTap gives it
// after each; the embedding row is the stream before sublayer 0), it records:
//  * a read outside the window: an op of sublayer s reads value v (a gate or up term of
//    an MLP, any read of a memory op) and the dim holds a nonzero |x| outside the window,
//    or a NaN or an infinity;
//  * a dirty start: s is the first sublayer that accesses v (v is not an interface
//    input, which the embedding sets) and v's dim does not hold +0 (bit pattern 0).
// Knows nothing about the engine: it only reads the spans it is given.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compiler/allocate.h"
#include "compiler/ir.h"
#include "compiler/schedule.h"

namespace qpu::compiler {

class WindowCheck {
 public:
  // `inputs`: the interface inputs (set by the embedding, may hold anything in the window
  // or -0 at their first read). `norm_exponent`: emit.h's k.
  WindowCheck(const Program& program, const Schedule& schedule, const Allocation& allocation,
              const std::vector<ValueId>& inputs, int norm_exponent);

  // The residual stream before sublayer s (hidden_size floats; qpu::Error for another size).
  void before_sublayer(int64_t s, std::span<const float> residual);

  int64_t violations() const { return violations_; }
  // The first `kept` violations, one line each: sublayer, kind, op, value, dim, the float.
  const std::vector<std::string>& first_violations() const { return first_; }
  static constexpr size_t kept = 20;

 private:
  struct Read {
    ValueId value;
    size_t op;
  };
  void report(int64_t s, const char* kind, size_t op, ValueId v, float x);

  const Program& program_;
  const Allocation& allocation_;
  float low_, high_;
  std::vector<std::vector<Read>> reads_;     // per sublayer
  std::vector<std::vector<ValueId>> starts_;  // per sublayer: the values it accesses first
  std::vector<size_t> start_op_;              // per value: the op of its first access
  int64_t violations_ = 0;
  std::vector<std::string> first_;
};

}  // namespace qpu::compiler
