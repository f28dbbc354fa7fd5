#pragma once
// A table of constants indexed by an exact integer value: row `index` of a rows x cols
// table lands in cols values, every entry exactly (docs/npu-units.md, "Table lookup").
// Used by RoPE (the (fcr, fci) of a position) and by the nested token embedding (row
// `token` of token_embedding_table: how a story token becomes x without crossing up).
//
// Two MLP sublayers:
//  1. one-hot: r_m = silu(128 (index - m)) / 128 = max(index - m, 0) exactly for an
//     integer index in [0, rows) (gates are 0 or multiples of 128 of magnitude >= 128:
//     silu's exact windows), and H_r = r_(r-1) - 2 r_r + r_(r+1) = [index == r] (a sum
//     of three small integers, exact in any order);
//  2. select: per row r one neuron (gate 128 H_r, up H_r / 128: exactly 1 or +-0) whose
//     down column holds the row: each output value receives its constant as the one
//     live term of its down sum (the other rows' neurons give +-0). A select
//     (Program::mlp_select): a host with a small intermediate size takes it in runs of
//     rows, one after another (compiler/split_mlp.h).
// The one-hot's rows come in chunks of kOneHotChunk, each with its own ramps (the two at
// a chunk's ends are repeated in the next), so that a host with a small intermediate
// size can take the chunks in separate sublayers (compiler/split_mlp.h); every H_r is
// the same three terms either way.
// The constants of sublayer 1 read compiler::kOne; a caller that needs the idle
// contract passes the lookup's ops to compiler::enable_constants (index 0 is a valid
// row, so an idle lookup needs an enable, not just a zero index).
// Window: every table entry 0 or in the value window of the outputs (|c| in
// [2^-78, 2^36] for values that later ops read, docs/npu.md); rows <= 2^16.
#include <span>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::npu {

struct TableLookup {
  std::vector<compiler::ValueId> one_hot;  // rows values: exactly 1 at index, +-0 elsewhere
  std::vector<compiler::ValueId> out;      // cols values: the row
};

inline constexpr int kOneHotChunk = 126;  // rows per chunk: 128 ramps

// Sublayer 1 alone: rows values, exactly 1 at an integer index in [0, rows), +-0 elsewhere
// (and all +-0 for an integer index outside it, e.g. -1 or rows). Throws for rows
// outside [1, 65536].
std::vector<compiler::ValueId> one_hot(compiler::Program& p, compiler::ValueId index, int rows, const std::string& label);
// The same into values the caller made (rows = hot.size()), as one op labelled `label`.
void one_hot_into(compiler::Program& p, compiler::ValueId index, const std::vector<compiler::ValueId>& hot,
                  const std::string& label);

// table is rows x cols, row-major. Throws for empty or oversized shapes, a table of
// the wrong length, or a non-finite entry.
TableLookup table_lookup(compiler::Program& p, compiler::ValueId index, std::span<const float> table, int rows, int cols,
                         const std::string& label);

// The nested model's token embedding: x = token_embedding_table[token] (run.c's
// memcpy), for an exact integer token in [0, vocab_size). Idle contract: with enable
// exactly 0 and token 0 every value it owns receives only +-0.
TableLookup embedding_lookup(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint, compiler::ValueId enable,
                             compiler::ValueId token);

}  // namespace qpu::npu
