// A run taken over by stock transformers from a state snapshot: the M1 machine written as
// `qpu compile` writes a checkpoint, run by `qpu generate` from its files with
// --snapshot-at, then python/resume_from_snapshot.py loads each snapshot into
// transformers' own cache and goes on greedily: every host token it picks equals the
// engine's stream (and the engine's stream is the machine's expected one).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/run_command.h"
#include "common/testing/scratch_files.h"
#include "machine/testing/machine.h"
#include "machine/machine_checkpoint.h"
#include "machine_runner.h"

namespace qpu::machine {
namespace {

namespace fs = std::filesystem;

std::vector<int64_t> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<int64_t> ids;
  for (int64_t t = 0; in >> t;) ids.push_back(t);
  return ids;
}

std::string csv(const std::vector<int64_t>& ids, char sep) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? std::string(1, sep) : "") + std::to_string(ids[i]);
  return s;
}

TEST(TransformersSnapshot, StockTransformersGoesOnFromEverySnapshot) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  std::mt19937_64 rng(4242);
  const MachineOptions o = testing::random_m1_options(rng);
  const Machine m = build_machine(o);
  qpu::testing::ScratchDir scratch;
  const fs::path dir = scratch / "m1";
  write_machine_checkpoint(dir, m, {});
  std::vector<float> x;
  for (int i = 0; i < 8; ++i) x.push_back(testing::random_float(rng, -3, 3));
  const std::vector<int64_t> prompt = m.prompt(x);
  const std::vector<int64_t> expected = m.expected_stream(x, o.a, o.b);
  const auto p = static_cast<int64_t>(prompt.size()), g = static_cast<int64_t>(expected.size());
  // Inside the prompt, early in the generation, near its end.
  const std::vector<int64_t> at = {p - 3, p + 4, p + g - 8};
  const auto run = [&](const std::string& cmd) {
    return qpu::testing::run_command(cmd, fs::temp_directory_path() / ("qpu-snapshot-test-" + std::to_string(getpid())));
  };
  const auto engine = run("'" + std::string(QPU_BINARY) + "' generate '" + dir.string() + "' --tokens " +
                          csv(prompt, ',') + " -n " + std::to_string(g) + " --threads 1 --snapshot-at " + csv(at, ',') +
                          " --snapshot-dir '" + (scratch / "snapshots").string() + "'");
  ASSERT_EQ(engine.status, 0) << engine.err;
  const std::vector<int64_t> generated = parse_ids(engine.out.substr(0, engine.out.find('\n')));
  ASSERT_EQ(generated, expected);
  std::vector<int64_t> stream = prompt;
  stream.insert(stream.end(), generated.begin(), generated.end());
  for (int64_t k : at) {
    SCOPED_TRACE("snapshot after " + std::to_string(k) + " tokens");
    const fs::path snap = scratch / "snapshots" / ("state-" + std::to_string(k) + ".safetensors");
    ASSERT_TRUE(fs::exists(snap));
    // The tokens the run was given from position k on (the rest of the prompt, or the one
    // generated token at k), then the host's own picks.
    const int64_t given_end = std::max(k + 1, p);
    const std::vector<int64_t> given(stream.begin() + k, stream.begin() + given_end);
    const int64_t steps = std::min<int64_t>(12, static_cast<int64_t>(stream.size()) - given_end);
    const auto resumed = run(python + " '" + std::string(QPU_SOURCE_DIR) + "/python/resume_from_snapshot.py' '" +
                             dir.string() + "' '" + snap.string() + "' " + csv(given, ',') + " " + std::to_string(steps));
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    const std::vector<int64_t> want(stream.begin() + given_end, stream.begin() + given_end + steps);
    EXPECT_EQ(parse_ids(resumed.out), want);
  }
}

}  // namespace
}  // namespace qpu::machine
