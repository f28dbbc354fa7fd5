#pragma once
// An MLP op wider than the host's intermediate size, split into ops that each fit.
//
// An op's neurons fall into parts that share nothing: two neurons are in one part when
// they write the same value, or when one reads a value the op writes (an op sees its
// inputs as they were at the start of its sublayer, so a neuron that reads what the op
// writes must stay in the op's sublayer). Every value the op writes then gets all its
// down terms from one part, so each part placed in a sublayer of its own adds to each of
// its values the same terms as the whole op did (the ops of a sublayer never share a
// destination, ir.h, and the builders' sums are exact in any order), and no part reads
// what another part writes. The parts are packed, in neuron order, into as few ops as
// the limit allows (first fit), each keeping the op's label.
//
// A select (Op::one_live_neuron: on every token at most one neuron adds anything but
// +-0) is cut into runs of consecutive neurons instead, which may write the same values:
// the scheduler puts such ops in successive sublayers (ir.h: writes of one value keep
// program order), the run holding the live neuron adds its term (plus +-0 terms) and
// every other run adds +-0, and x + (+-0) == x for every x != 0 (a zero stays a zero), so
// each value ends as it would after the whole op, up to the sign of a zero, which no
// builder relies on (values are "exactly v or +-0").
//
// The program's explicit orders follow the ops they named. Ops within the limit, and
// every memory op, are copied as they are.
#include <cstdint>

#include "compiler/ir.h"

namespace qpu::compiler {

// Throws qpu::Error naming the op when one of its parts alone has more than
// max_neurons neurons (that op cannot fit an MLP sublayer however it is scheduled).
Program split_wide_mlps(const Program& program, int64_t max_neurons);

}  // namespace qpu::compiler
