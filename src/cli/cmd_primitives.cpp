// `qpu primitives [--long] [--only NAME]`: the NPU conformance suite on the engine.
// Default: 20,000 random cases per primitive (plus edge cases); --long: 1,048,576.
// divide and sqrt are ~40-layer checkpoints (~2 ms per case): their --long runs take
// ~35 CPU-minutes each, so run them with --only on separate cores.
#include <chrono>
#include <cstdio>

#include "cli/command_registry.h"
#include "npu/engine_host.h"
#include "npu/gdn_memory_suite.h"
#include "npu/memory_suite.h"
#include "npu/suite.h"

namespace {

struct Flags {
  bool long_run = false;
  std::string only;
};

qpu::cli::Runner setup(CLI::App& app) {
  auto flags = std::make_shared<Flags>();
  app.add_flag("--long", flags->long_run, "Run >= 1M random cases per primitive");
  app.add_option("--only", flags->only, "Run only this primitive (or 'memory', 'gdn_memory')");
  return [flags] {
    int64_t failures = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& spec : qpu::npu::all_primitives()) {
      if (!flags->only.empty() && flags->only != spec.name) continue;
      qpu::npu::SuiteOptions o;
      o.cases = flags->long_run ? (int64_t{1} << 20) : 20000;
      const auto r = qpu::npu::run_primitive(spec, qpu::npu::engine_host(), o);
      std::printf("%-14s cases %9lld  mismatches %lld  layers %lld  sublayers %lld  neurons/lane %lld  values/lane %lld\n",
                  r.name.c_str(), static_cast<long long>(r.cases), static_cast<long long>(r.mismatches),
                  static_cast<long long>(r.layers), static_cast<long long>(r.sublayers),
                  static_cast<long long>(r.neurons_per_lane), static_cast<long long>(r.values_per_lane));
      if (r.mismatches) std::printf("  first mismatch: %s\n", r.first_mismatch.c_str());
      failures += r.mismatches;
      std::fflush(stdout);
    }
    if (flags->only.empty() || flags->only == "memory") {
      qpu::npu::MemoryOptions o;
      if (flags->long_run) {
        o.writes_per_sequence = 2048;
        o.reads_per_sequence = 2048;
        o.sequences = 2;
      }
      const auto r = qpu::npu::run_memory_suite(o);
      std::printf("%-14s values %8lld  mismatches %lld  (attention memory, %lld sequences)\n", "memory",
                  static_cast<long long>(r.values_read), static_cast<long long>(r.mismatches),
                  static_cast<long long>(r.sequences));
      if (r.mismatches) std::printf("  first mismatch: %s\n", r.first_mismatch.c_str());
      failures += r.mismatches;
    }
    if (flags->only.empty() || flags->only == "gdn_memory") {
      // 128 x 128 GDN heads; --long: 16 heads x 600 tokens >= 1M values written and read.
      qpu::npu::GdnMemoryOptions o;
      o.heads = flags->long_run ? 16 : 8;
      o.tokens = flags->long_run ? 600 : 100;
      const auto r = qpu::npu::run_gdn_memory_suite(o, qpu::npu::engine_host());
      std::printf("%-14s values written %lld  read %lld (%lld from written rows)  mismatches %lld  (GDN memory: "
                  "%lld heads, %lld tokens, %lld row overwrites, %lld wipes, hidden %lld, %.3f ms/token)\n",
                  "gdn_memory", static_cast<long long>(r.values_written), static_cast<long long>(r.values_read),
                  static_cast<long long>(r.values_read_from_written_rows), static_cast<long long>(r.mismatches), static_cast<long long>(o.heads),
                  static_cast<long long>(r.tokens), static_cast<long long>(r.overwrites),
                  static_cast<long long>(r.wipes), static_cast<long long>(r.hidden_size), 1e3 * r.seconds_per_token);
      if (r.mismatches) std::printf("  first mismatch: %s\n", r.first_mismatch.c_str());
      failures += r.mismatches;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %lld mismatches in %.1f s\n", failures ? "FAIL" : "PASS", static_cast<long long>(failures), s);
    return failures ? 1 : 0;
  };
}

qpu::cli::Registration reg{"primitives", "Run the NPU primitives' conformance suite on the engine", setup};

}  // namespace
