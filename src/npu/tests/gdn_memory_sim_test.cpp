// The GDN memory under the order-adversarial HostSim (a fresh random summation order
// in every projection row, conv, l2norm, state read, read-out and norm sum): the
// memory's exactness does not depend on the order an engine happens to use.
#include <gtest/gtest.h>

#include "compiler/host_sim.h"
#include "npu/gdn_memory_suite.h"

namespace qpu::npu {
namespace {

HostFactory sim_host(uint64_t seed) {
  return [seed](const io::Qwen35Weights& w) -> Forward {
    auto sim = std::make_shared<compiler::HostSim>(w, seed);
    auto logits = std::make_shared<std::vector<float>>(1);
    return [sim, logits](int64_t token, std::span<float> hidden) { sim->forward(token, *logits, hidden); };
  };
}

TEST(GdnMemorySim, ExactUnderRandomSummationOrders) {
  for (const auto& [dk, dv, tokens] : {std::tuple<int64_t, int64_t, int64_t>{128, 128, 80}, {64, 16, 120},
                                       {32, 32, 120}, {16, 32, 120}}) {
    GdnMemoryOptions o;
    o.key_head_dim = dk;
    o.value_head_dim = dv;
    o.heads = 2;
    o.tokens = tokens;
    o.wipe_probability = 0.04;
    o.seed = static_cast<uint64_t>(7 * dk + dv);
    SCOPED_TRACE(std::to_string(dk) + "x" + std::to_string(dv));
    const GdnMemoryResult r = run_gdn_memory_suite(o, sim_host(o.seed));
    EXPECT_EQ(r.tokens, tokens);
    EXPECT_GT(r.values_read_from_written_rows, r.values_read / 2);
    EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  }
}

}  // namespace
}  // namespace qpu::npu
