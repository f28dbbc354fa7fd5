#pragma once
// The carry crossing as a routine that every chain of a machine calls (docs/npu-machine.md,
// "Chains in segments"): the micro-ops that take a chain's running values from the cycle of
// one segment up to the cycle of the next one.
//
// A segment micro-op that goes on to another segment is a call: on its cycle its chain's
// carry (values of the residual window) is split into two uplink floats per value
// (machine/carry_crossing.h) and parked in a wide float RAM (machine/wide_float_ram.h),
// and the micro-op names CROSS.j as its successor and the next segment's micro-op as its
// continuation (MicroOp::call). CROSS.k sends parked float k into element k of register
// `reg` (4 cycles: the token and its 3 value tokens) and names CROSS.(k + 1); the last one
// returns to the continuation (SuccessorTiming::Return), which reads the register and joins
// the carry back (join()):
//
//   segment s -> CROSS.j [3 value tokens] -> ... -> CROSS.(n - 1) [3 value tokens] -> segment s + 1
//
// A chain of c values parks its floats in the last 2 c places, so it calls CROSS.(n - 2 c)
// (first_cross()) and its continuation reads elements n - 2 c .. n - 1. A carry of c
// values costs 8 c cycles per crossing, whatever the chain; a chain whose values fit the
// uplink's window parks them as they are (carry_floats: 4 cycles each).
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "machine/assembler.h"

namespace qpu::machine {

class CrossingRoutine {
 public:
  // The routine's control names for carries of up to `values` values: CROSS.0 ... CROSS.(2 values - 1).
  static std::vector<std::string> names(int values);

  // Makes the routine's flag (a token input) and the machine's return register
  // (Assembler::return_register). Call before send(). `reg`: the register row the floats
  // land in, elements 0 .. 2 values - 1. Throws for values < 1 or more floats than the
  // register file's elements.
  CrossingRoutine(Assembler& as, int values, int64_t reg);

  // A chain's carry: x (at most `values` values of the residual window, +-0 where `enable`
  // is 0), split on cycles where `enable` is 1 and parked where `park` is 1 (0 or 1, and 0
  // where `enable` is 0). Call before build(); chains never park on the same cycle.
  void carry(const std::vector<compiler::ValueId>& x, compiler::ValueId enable, compiler::ValueId park,
             const std::string& label);

  // The same for floats that are uplink floats already (+-0 or |x| in [2^-47, 2^20), e.g. a
  // chain's value scaled into the window): one place each, the last `floats.size()`.
  void carry_floats(const std::vector<compiler::ValueId>& floats, compiler::ValueId park, const std::string& label);

  // The park RAM, after every carry(). Returns the lanes the machine appends to send()'s.
  std::vector<compiler::ValueId> build();

  // Defines CROSS.k: lane first_lane + k of the machine's send(), whose enable is `send`.
  void define(int first_lane, compiler::ValueId send);

  // The CROSS token a segment micro-op of a chain of `count` values names as its successor
  // (of `count` floats: first_cross_of_floats).
  std::string first_cross(size_t count) const { return first_cross_of_floats(2 * count); }
  std::string first_cross_of_floats(size_t count) const;
  // The carry of `count` values that the continuation reads: register_out()'s elements
  // n - 2 count .. n - 1 joined pairwise on cycles where `enable` is 1 (the continuation's
  // flag; it sets MicroOp::read_register = reg()). +-0 where the register is not read.
  std::vector<compiler::ValueId> join(size_t count, compiler::ValueId enable, const std::string& label) const;
  // The last `count` floats as they arrive (register_out()'s elements n - count .. n - 1).
  std::vector<compiler::ValueId> arrived_floats(size_t count) const;

  int64_t reg() const { return reg_; }
  int floats() const { return static_cast<int>(park_.size()); }

 private:
  Assembler& as_;
  int64_t reg_ = 0;
  compiler::ValueId on_ = 0;                // CROSS's flag
  std::vector<compiler::ValueId> park_;     // the parked floats (the RAM's data)
  std::vector<compiler::ValueId> parking_;  // the chains' park flags
  std::vector<compiler::ValueId> lanes_;
};

}  // namespace qpu::machine
