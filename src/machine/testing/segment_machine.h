#pragma once
// A chain cut into segments (docs/npu-machine.md, "Chains in segments"): the smallest
// machine that runs a C loop longer than any stack, `acc = 0; for (t = 0; t < n; t++)
// acc += x[t];` over up to `capacity` terms, with a machine whose chain unit does not
// grow with the capacity. One cycle adds the `width` terms of one segment to the running
// value; the running value crosses up to the next segment's cycle as two floats
// (machine/carry_crossing.h), and a branch decides whether another segment follows.
//
// Host vocabulary: the value tokens, then the control tokens:
//   HDR, NOP, DONE;
//   WN              N (the term count) into the scalar register N (3 value tokens follow);
//   WT.i            term i of a segment into element i of register 0 (3 value tokens);
//   PUT.r           register 0 (the segment's terms) into row r of the term RAM (one head
//                   per 16 rows: row r is head r / 16, row r mod 16);
//   SEG.s           reads row s of the term RAM, N and the carry (register 1, s >= 1;
//                   segment 0 starts from 0), adds the terms t = s w + j < N in C's order
//                   and calls the crossing routine (machine/crossing_routine.h) with the
//                   result, continuation NX.s;
//   CROSS.0, CROSS.1  the routine: the result's two crossing floats into elements 0 and 1
//                   of register 1, then back to NX.s;
//   NX.s            branches on [N > (s + 1) w]: SEG.(s + 1), else DONE.
//
// So a run of n terms generates, per segment s < ceil(n / w): CROSS.0, the parts of
// high_s, CROSS.1, the parts of low_s, NX.s, then SEG.(s + 1) or DONE (10 cycles per
// segment), where high_s and low_s are the crossing floats of C's running sum after
// segment s.
// Terms: +-0 or |x| in [2^-26, 2^11) (one float RAM window); then every partial sum of
// up to 4,096 terms is +-0 or in [2^-49, 2^24): inside the crossing's window.
#include <cstdint>
#include <string>
#include <vector>

#include "machine/assembler.h"

namespace qpu::machine {

struct SegmentMachineOptions : HostOptions {
  int width = 8;        // terms per segment (register elements; <= 31, one RAM row)
  int capacity = 64;    // terms the machine holds (a multiple of width, <= 4,096)
};

struct SegmentMachine : AssembledMachine {
  int width = 0, capacity = 0;

  int segments() const { return capacity / width; }
  // HDR, WN and n, the terms segment by segment (WT.i and the term; PUT.r), then SEG.0.
  // Terms past n in the last segment are written too (`terms` may be longer than n: the
  // machine must leave them out).
  std::vector<int64_t> prompt(int n, const std::vector<float>& terms) const;
  // What the machine generates after the prompt: C's running sum crossing after every
  // segment up to n, then DONE.
  std::vector<int64_t> expected_stream(int n, const std::vector<float>& terms) const;
};

// Throws qpu::Error for a width outside [1, 31] or a capacity that is not a positive
// multiple of the width up to 4,096.
SegmentMachine build_segment_machine(const SegmentMachineOptions& options);

// True for a term the machine holds: +-0 or |x| in [2^-26, 2^11).
bool segment_machine_holds(float term);

}  // namespace qpu::machine
