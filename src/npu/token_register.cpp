#include "npu/token_register.h"

#include "common/error.h"

namespace qpu::npu {

TokenRegister token_register(compiler::Program& p, int vocab_size, const std::string& name) {
  // Cells id + 32 must stay integers below 2^24 (exact overwrites, docs/npu-gdn-memory.md).
  if (vocab_size < 1 || vocab_size > (1 << 24) - 64) fail("token_register: vocabulary of {} ids", vocab_size);
  TokenRegister r;
  r.id_in = p.value(name + ".id_in");
  r.write_flag = p.value(name + ".write");
  r.read_flag = p.value(name + ".read");
  r.id = p.value(name + ".id");
  compiler::GdnMemory m;
  m.write_flag = r.write_flag;
  m.read_flag = r.read_flag;
  m.data = {r.id_in};
  m.out = {r.id};
  m.offset = TokenRegister::kCellOffset;
  p.gdn_memory(name, m);
  return r;
}

}  // namespace qpu::npu
