#include "compiler/enable.h"

#include "common/error.h"

namespace qpu::compiler {

namespace {

int64_t replace(Lin& lin, ValueId enable, const std::string& label) {
  bool has_one = false, has_enable = false;
  for (const Term& t : lin.terms) {
    has_one = has_one || t.value == kOne;
    has_enable = has_enable || t.value == enable;
  }
  if (!has_one) return 0;
  if (has_enable)
    fail("enable_constants: op '{}' reads the enable value next to a constant in one form", label);
  int64_t n = 0;
  for (Term& t : lin.terms)
    if (t.value == kOne) {
      t.value = enable;
      ++n;
    }
  return n;
}

}  // namespace

int64_t enable_constants(Program& program, size_t first_op, ValueId enable) {
  if (enable < 0 || enable >= program.num_values())
    fail("enable_constants: enable {} is not a value of the program ({} values)", enable, program.num_values());
  auto& ops = program.mutable_ops();
  int64_t replaced = 0;
  for (size_t i = first_op; i < ops.size(); ++i) {
    Op& op = ops[i];
    if (op.kind != OpKind::Mlp) continue;
    for (Neuron& n : op.neurons) {
      replaced += replace(n.gate, enable, op.label);
      replaced += replace(n.up, enable, op.label);
    }
  }
  return replaced;
}

}  // namespace qpu::compiler
