#pragma once
// The nested token's id as a register of the looped machine (docs/npu-machine.md, M2,
// "The story token is the host's output"). The cycle whose input is a story token (the
// host's own output of the HEAD cycle) writes the token's id into a GDN memory with
// integer cells; the micro-ops of nested layer 0 read it back and look x up
// (embedding_lookup, table_lookup.h), so the nested token never crosses up as floats.
//
// One GdnMemory with no address bits (one row), key and data at tap 0 (the story
// token's own embedding sets the id and the write flag), integer cells id + kCellOffset
// (in [18, 2^24): exact through silu, exact on every overwrite), read at tap 0 by the
// tokens that set the read flag (the read sees this token's write). A token that sets
// neither flag leaves the register as it is; an empty register reads +0.
#include <string>

#include "compiler/ir.h"

namespace qpu::npu {

struct TokenRegister {
  compiler::ValueId id_in = 0;       // set by a story token's embedding: its nested id
  compiler::ValueId write_flag = 0;  // 1 on story tokens, else 0
  compiler::ValueId read_flag = 0;   // 1 on tokens whose micro-op needs the id, else 0
  compiler::ValueId id = 0;          // the id read (an exact integer); +0 when not read
  static constexpr float kCellOffset = 32.0f;
};

// Throws for a vocabulary whose ids do not fit the integer cells.
TokenRegister token_register(compiler::Program& p, int vocab_size, const std::string& name);

}  // namespace qpu::npu
