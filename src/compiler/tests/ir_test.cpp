#include <gtest/gtest.h>

#include "common/error.h"
#include "compiler/ir.h"

namespace qpu::compiler {
namespace {

TEST(Ir, ReadsAndWritesOfAnMlpOp) {
  Program p;
  const ValueId a = p.value("a"), b = p.value("b"), d = p.value("d");
  p.mlp("op", {Neuron{Lin{{{a, 1.0f}, {kOne, 2.0f}}}, Lin{{{b, 1.0f}, {a, 3.0f}}}, {{d, 1.0f}}}});
  EXPECT_EQ(p.ops()[0].reads(), (std::vector<ValueId>{a, b}));
  EXPECT_EQ(p.ops()[0].writes(), (std::vector<ValueId>{d}));
  EXPECT_NO_THROW(p.validate());
}

TEST(Ir, ValidateNamesTheBadOp) {
  Program p;
  const ValueId a = p.value("a");
  p.mlp("broken", {Neuron{Lin{{{a + 5, 1.0f}}}, Lin{}, {{a, 1.0f}}}});
  try {
    p.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos);
  }
  Program q;
  const ValueId x = q.value("x");
  q.mlp("nan", {Neuron{Lin{{{x, NAN}}}, Lin{}, {{x, 1.0f}}}});
  EXPECT_THROW(q.validate(), Error);
  Program r;
  r.mlp("empty", {});
  EXPECT_THROW(r.validate(), Error);
}

}  // namespace
}  // namespace qpu::compiler
