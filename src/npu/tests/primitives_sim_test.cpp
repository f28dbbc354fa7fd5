// Every primitive against C under the order-adversarial HostSim (a fresh random
// summation order for every dot product), 1,500 random cases each plus the edges. The
// engine run (npu_conformance_test) is the conformance suite proper; this one proves
// that the results do not depend on the order an engine happens to use.
#include <gtest/gtest.h>

#include "compiler/host_sim.h"
#include "npu/suite.h"

namespace qpu::npu {
namespace {

HostFactory sim_host(uint64_t seed) {
  return [seed](const io::Qwen35Weights& w) -> Forward {
    auto sim = std::make_shared<compiler::HostSim>(w, seed);
    auto logits = std::make_shared<std::vector<float>>(1);
    return [sim, logits](int64_t token, std::span<float> hidden) { sim->forward(token, *logits, hidden); };
  };
}

class PrimitiveSim : public ::testing::TestWithParam<std::string> {};

TEST_P(PrimitiveSim, MatchesCUnderRandomSummationOrders) {
  for (const PrimitiveSpec& spec : all_primitives()) {
    if (spec.name != GetParam()) continue;
    SuiteOptions o;
    // Every primitive the same count, the deep checkpoints (divide, sqrt, expf) too: the
    // simulator sums only nonzero products (HostSim::dot), so a sparse checkpoint costs it
    // little more than the engine (expf took 366 s at a tenth of these cases before that).
    o.cases = QPU_NPU_CASES;
    o.rows = 64;
    o.max_hidden = 256;
    o.seed = 7;
    const SuiteResult r = run_primitive(spec, sim_host(11), o);
    EXPECT_EQ(r.cases, o.cases + static_cast<int64_t>(spec.edge_cases.size()));
    EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
    return;
  }
  FAIL() << "no primitive " << GetParam();
}

std::vector<std::string> with_greater_windows(std::vector<std::string> names) {
  for (std::string& n : greater_spec_names()) names.push_back(std::move(n));
  return names;
}

INSTANTIATE_TEST_SUITE_P(All, PrimitiveSim,
                         ::testing::ValuesIn(with_greater_windows({"mul", "add", "dot_const", "dot_var", "dot_fused_const", "dot_fused_var", "round_to_int", "split12",
                                           "int_to_bits", "max_step", "argmax", "xorshift", "divide", "divide_const", "divide_shared", "sqrt",
                                           "expf"})));

}  // namespace
}  // namespace qpu::npu
