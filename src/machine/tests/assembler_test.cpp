// The assembler's checks (machine/assembler.h): every malformed machine description is a
// qpu::Error naming what is wrong, before anything is compiled. The machines that do
// compile are tested end to end in machine_test.cpp, ffn_machine_test.cpp and
// qkv_machine_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "common/error.h"
#include "machine/assembler.h"

namespace qpu::machine {
namespace {

AssemblerOptions small() {
  AssemblerOptions o;
  o.elements = 2;
  o.value_jmin = -8;
  o.value_jmax = 8;
  return o;
}

// The message of the qpu::Error that f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Assembler, RejectsBadControlNames) {
  EXPECT_NE(error_of([] { Assembler(small(), {}, "DONE"); }), "");
  EXPECT_NE(error_of([] { Assembler(small(), {"A", ""}, "A"); }).find("no name"), std::string::npos);
  EXPECT_NE(error_of([] { Assembler(small(), {"A", "B", "A"}, "A"); }).find("named twice"), std::string::npos);
  EXPECT_NE(error_of([] { Assembler(small(), {"A", "B"}, "DONE"); }).find("DONE"), std::string::npos);
  AssemblerOptions o = small();
  o.elements = 0;
  EXPECT_NE(error_of([&] { Assembler(o, {"DONE"}, "DONE"); }), "");
  o = small();
  o.emit_layers = false;
  o.reuse_dims = false;
  EXPECT_NE(error_of([&] { Assembler(o, {"DONE"}, "DONE"); }).find("reuse_dims"), std::string::npos);
}

TEST(Assembler, RejectsBadMicroOps) {
  Assembler as(small(), {"HDR", "DONE", "W"}, "DONE");
  const auto flag = as.input("flag");
  MicroOp sends = as.step("DONE");
  sends.lane = 0;
  EXPECT_NE(error_of([&] { as.define("W", sends); }).find("lane 0"), std::string::npos);  // before send()
  as.send(as.register_out(), flag, as.program().ops().size());
  EXPECT_NE(error_of([&] { as.send(as.register_out(), flag, as.program().ops().size()); }).find("twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { as.scalar_register("POS"); }).find("after send"), std::string::npos);
  sends.lane = 2;
  EXPECT_NE(error_of([&] { as.define("W", sends); }).find("lane 2 outside the 2 lanes"), std::string::npos);
  MicroOp op;
  EXPECT_NE(error_of([&] { as.define("HDR", op); }).find("successor"), std::string::npos);  // none given
  op.successor = 3;
  EXPECT_NE(error_of([&] { as.define("HDR", op); }).find("successor"), std::string::npos);
  op.successor = 1;
  EXPECT_NE(error_of([&] { as.define("NOPE", op); }).find("NOPE"), std::string::npos);
  MicroOp w = op;
  w.write_register = 0;
  w.write_element = 2;  // two elements, no scalar
  EXPECT_NE(error_of([&] { as.define("W", w); }).find("element 2"), std::string::npos);
  w.write_element = 1;
  w.write_register = 99;
  EXPECT_NE(error_of([&] { as.define("W", w); }).find("register 99"), std::string::npos);
  as.define("HDR", op);
  EXPECT_NE(error_of([&] { as.define("HDR", op); }).find("defined twice"), std::string::npos);
  // W and DONE are still undefined: finish() names the first one.
  EXPECT_NE(error_of([&] { as.finish(); }).find("'DONE' has no micro-op"), std::string::npos);
}

// Calls and returns (machine/crossing_routine.h uses them): both need the return register,
// made before send(); a call names a control token; a Return micro-op names no successor.
TEST(Assembler, RejectsBadCallsAndReturns) {
  Assembler as(small(), {"HDR", "DONE", "C", "R"}, "DONE");
  const auto flag = as.input("flag");
  MicroOp call = as.step("R");
  call.call = 1;
  EXPECT_NE(error_of([&] { as.define("C", call); }).find("no return register"), std::string::npos);
  MicroOp ret;
  ret.timing = SuccessorTiming::Return;
  EXPECT_NE(error_of([&] { as.define("R", ret); }).find("no return register"), std::string::npos);
  as.return_register();
  EXPECT_NE(error_of([&] { as.return_register(); }).find("twice"), std::string::npos);
  call.call = 4;
  EXPECT_NE(error_of([&] { as.define("C", call); }).find("calls 4"), std::string::npos);
  ret.successor = 1;
  EXPECT_NE(error_of([&] { as.define("R", ret); }).find("names a successor and returns"), std::string::npos);
  as.send(as.register_out(), flag, as.program().ops().size());
  Assembler late(small(), {"HDR", "DONE"}, "DONE");
  late.send(late.register_out(), late.input("flag"), late.program().ops().size());
  EXPECT_NE(error_of([&] { late.return_register(); }).find("after send"), std::string::npos);
}

// Computed successors and immediates (the story token of the HEAD machine): a Computed
// micro-op needs the datapath's one-hot, names no successor of its own, and the one-hot
// covers consecutive control tokens that exist; an immediate is a small integer.
TEST(Assembler, RejectsBadComputedSuccessorsAndImmediates) {
  Assembler as(small(), {"HDR", "DONE", "H", "T.0", "T.1"}, "DONE");
  const auto flag = as.input("flag");
  const Assembler::Immediate tok = as.immediate_register("TOK");
  EXPECT_NE(error_of([&] { as.immediate(tok, -1); }).find("immediate -1"), std::string::npos);
  EXPECT_NE(error_of([&] { as.immediate(tok, int64_t{1} << 20); }).find("outside"), std::string::npos);
  const auto sets = as.immediate(tok, 5);
  ASSERT_EQ(sets.size(), 3u);
  EXPECT_EQ(sets[1].second, 37.0f);  // k + 32: silu passes it exactly
  EXPECT_EQ(sets[2].second, 32.0f);
  MicroOp head;
  head.timing = SuccessorTiming::Computed;
  EXPECT_NE(error_of([&] { as.define("H", head); }).find("none was computed"), std::string::npos);
  const auto hot = as.program().values("hot", 3);
  EXPECT_NE(error_of([&] { as.computed_successor("T.0", hot); }).find("run past"), std::string::npos);
  EXPECT_NE(error_of([&] { as.computed_successor("T.0", {}); }).find("no tokens"), std::string::npos);
  as.computed_successor("T.0", {hot[0], hot[1]});
  EXPECT_NE(error_of([&] { as.computed_successor("T.0", {hot[0]}); }).find("twice"), std::string::npos);
  head.successor = 1;
  EXPECT_NE(error_of([&] { as.define("H", head); }).find("names a successor"), std::string::npos);
  head.successor = -1;
  as.define("H", head);
  as.send(as.register_out(), flag, as.program().ops().size());
  EXPECT_NE(error_of([&] { as.immediate_register("B"); }).find("after send"), std::string::npos);
}

TEST(Assembler, RejectsBadBranches) {
  Assembler as(small(), {"HDR", "DONE", "B", "X"}, "DONE");
  EXPECT_NE(error_of([&] { as.define("B", as.branch_step("X", "DONE")); }).find("no branch condition"),
            std::string::npos);
  as.branch(as.input("cond"));
  MicroOp op = as.branch_step("X", "DONE");
  op.otherwise = 7;
  EXPECT_NE(error_of([&] { as.define("B", op); }).find("no second successor"), std::string::npos);
  EXPECT_NE(error_of([&] { as.branch_step("X", "Y"); }).find("Y"), std::string::npos);
  as.define("B", as.branch_step("X", "DONE"));
}

TEST(Assembler, FinishNeedsSend) {
  Assembler as(small(), {"DONE"}, "DONE");
  MicroOp op;
  op.successor = 0;
  as.define("DONE", op);
  EXPECT_NE(error_of([&] { as.finish(); }).find("send()"), std::string::npos);
}

}  // namespace
}  // namespace qpu::machine

namespace qpu::machine {
namespace {

// A machine without branches makes no branch staging codes, and none of its token inputs
// is listed twice. An unmade code once named value 0 (the register file's first channel)
// as a 0/1 flag, which then cleared itself as one and lost the parts sent in that channel.
TEST(Assembler, EveryTokenInputOnceWithoutBranches) {
  Assembler as(small(), {"HDR", "NOP", "DONE", "W"}, "DONE");
  const compiler::ValueId flag = as.input("flag");
  as.send(as.register_out(), flag, as.program().ops().size());
  as.define_header("W");
  MicroOp w = as.write(0, 0, "DONE");
  w.sets = {{flag, 1.0f}};
  w.lane = 0;
  as.define("W", w);
  const AssembledMachine m = as.finish();
  std::set<compiler::ValueId> seen;
  for (compiler::ValueId v : m.interface.inputs) {
    ASSERT_GE(v, 0);
    EXPECT_TRUE(seen.insert(v).second) << m.program.name(v);
  }
  EXPECT_GT(seen.size(), 10u);
}

}  // namespace
}  // namespace qpu::machine
