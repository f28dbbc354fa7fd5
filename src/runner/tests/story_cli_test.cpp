// `qpu story` as a user runs it: `-n 2 --verify` on stories260K must print exactly the
// bytes `qpu ref -t 0 -n 2` prints (run as a process too, not hard-coded), report the
// verification, and bad flags or files must be errors with exit code 1. Sampled
// (`-t 1.0 -s 42 -p 1`) and top-p (`-t 0.8 -p 0.9 -s 7 -i Lily`): the bytes of `qpu ref` with the same flags.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/run_command.h"
#include "engine/dot.h"

namespace {

namespace fs = std::filesystem;

const std::string kModels = std::string(QPU_SHARED_DIR) + "/models/stories260K/";

using Result = qpu::testing::CommandResult;

// `environment`: assignments put before the command (QPU_ISA=avx2).
Result run_qpu(const std::string& args, const std::string& environment = "") {
  return qpu::testing::run_command(environment + " '" + QPU_BINARY + "' " + args,
                                   fs::temp_directory_path() / ("qpu-story-test-" + std::to_string(getpid()) + ".err"));
}

// --profile's rows: micro-op family -> host cycles.
std::map<std::string, long long> profile_cycles(const std::string& err) {
  std::map<std::string, long long> cycles;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("profile: ", 0) != 0 || line.find(" host forwards, ") != std::string::npos) continue;
    // "profile: <family, may hold one space> <cycles> <seconds> <share>% <ms> <sublayers>"
    std::istringstream row(line.substr(9));
    std::vector<std::string> words;
    for (std::string w; row >> w;) words.push_back(w);
    if (words.size() < 6 || words[0] == "micro-op") continue;
    std::string family = words[0];
    for (size_t i = 1; i + 5 < words.size(); ++i) family += " " + words[i];
    cycles[family] = std::stoll(words[words.size() - 5]);
  }
  return cycles;
}

TEST(StoryCli, TwoStepsPrintWhatRefPrintsAndVerify) {
  const Result ref = run_qpu("ref '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin' -t 0 -n 2");
  ASSERT_EQ(ref.status, 0) << ref.err;
  ASSERT_GT(ref.out.size(), 1u);  // two tokens' text and the final newline
  const Result story = run_qpu("story --model '" + kModels + "stories260K.bin' -z '" + kModels +
                               "tok512.bin' -n 2 --verify --profile --threads 1");
  ASSERT_EQ(story.status, 0) << story.err;
  EXPECT_EQ(story.out, ref.out);
  // 2 positions of 5 layers x 64 elements (x after the FFN) + INC; BOS and 2 story tokens.
  EXPECT_NE(story.err.find("verify: 642 floats, 2 logits vectors and 3 tokens bit-identical to run.c"), std::string::npos) << story.err;
  EXPECT_NE(story.err.find("story: token machine for 2 nested positions: layers "), std::string::npos) << story.err;
  EXPECT_NE(story.err.find("story: as a dense checkpoint: "), std::string::npos) << story.err;

  // The profile counts what docs/npu-machine.md (M2e) says one position costs: per layer
  // one QKV and one ATTO cycle, 8 SW chunks (stories260K's 172 hidden lanes in chunks of
  // 22, runner::token_machine_options) and 64 FFN elements sent up with 3 value tokens
  // each; INC and its 3 parts, HEAD once; 2 positions.
  const std::map<std::string, long long> cycles = profile_cycles(story.err);
  const std::map<std::string, long long> want = {{"QKV.#", 10},        {"ATTO(#).#", 10}, {"SW(#).#", 80},
                                                 {"FFN(#).#", 640},    {"FFN(#).# parts", 1920},
                                                 {"INC", 2},           {"INC parts", 6},  {"HEAD", 2}};
  for (const auto& [family, n] : want) {
    ASSERT_TRUE(cycles.count(family)) << family << "\n" << story.err;
    EXPECT_EQ(cycles.at(family), n) << family;
  }
  long long total = 0;
  for (const auto& [family, n] : cycles) total += n;
  const size_t at = story.err.find("profile: ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(story.err.substr(at, story.err.find(" host forwards", at) - at), "profile: " + std::to_string(total));
  // Every forward of the run, the prompt's too: the summary's host cycles.
  EXPECT_NE(story.err.find("story: " + std::to_string(total) + " host cycles, 2 nested tokens"), std::string::npos)
      << story.err;
}

// run.c's -i: the prompt's tokens forced by the machine, then greedy; the same bytes as
// `qpu ref -i` and every float verified.
TEST(StoryCli, PromptPrintsWhatRefPrintsAndVerifies) {
  const std::string files = "'" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin'";
  const Result ref = run_qpu("ref " + files + " -t 0 -n 4 -i 'Lily saw'");
  ASSERT_EQ(ref.status, 0) << ref.err;
  const Result story = run_qpu("story --model " + files + " -n 4 -i 'Lily saw' --verify --threads 1");
  ASSERT_EQ(story.status, 0) << story.err;
  EXPECT_EQ(story.out, ref.out);
  EXPECT_NE(story.err.find("verify: 1284 floats, 4 logits vectors and 5 tokens bit-identical to run.c"), std::string::npos) << story.err;
}

// run.c's sampling (-t 1.0 -s 42, topp 1: sample_mult) on the machine: the same bytes as
// `qpu ref` with the same flags, every float, logits vector and token verified (the story
// tokens against run.c's sampler, its coins drawn on the machine from the seed).
TEST(StoryCli, SampledStoryPrintsWhatRefPrintsAndVerifies) {
  const std::string files = "'" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin'";
  // 9 positions: seed 42's coin leaves the greedy story at position 8 ("a big", not "a little").
  const Result ref = run_qpu("ref " + files + " -t 1.0 -s 42 -p 1 -n 9");
  ASSERT_EQ(ref.status, 0) << ref.err;
  const Result greedy = run_qpu("ref " + files + " -t 0 -n 9");
  ASSERT_EQ(greedy.status, 0) << greedy.err;
  EXPECT_NE(ref.out, greedy.out);  // the sampled story is not the greedy one: the test sees sampling
  const Result story = run_qpu("story --model " + files + " -t 1.0 -s 42 -p 1 -n 9 --verify --threads 1");
  ASSERT_EQ(story.status, 0) << story.err;
  EXPECT_EQ(story.out, ref.out);
  EXPECT_NE(story.err.find("story: sampling token machine for 9 nested positions"), std::string::npos) << story.err;
  EXPECT_NE(story.err.find("verify: 2889 floats, 9 logits vectors and 10 tokens bit-identical to run.c"),
            std::string::npos)
      << story.err;
}

// Top-p (run.c's default -p 0.9) on the machine: -t 0.8 -p 0.9 -s 7 -i "Lily" prints the
// bytes `qpu ref` prints with the same flags, every float, logits vector and token verified.
TEST(StoryCli, ToppStoryPrintsWhatRefPrintsAndVerifies) {
  const std::string files = "'" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin'";
  const Result ref = run_qpu("ref " + files + " -t 0.8 -p 0.9 -s 7 -i Lily -n 12");
  ASSERT_EQ(ref.status, 0) << ref.err;
  const Result whole = run_qpu("ref " + files + " -t 0.8 -p 1 -s 7 -i Lily -n 12");
  ASSERT_EQ(whole.status, 0) << whole.err;
  EXPECT_NE(ref.out, whole.out);  // top-p picks other tokens than sample_mult here: the test sees top-p
  const Result story = run_qpu("story --model " + files + " -t 0.8 -p 0.9 -s 7 -i Lily -n 12 --verify --threads 1");
  ASSERT_EQ(story.status, 0) << story.err;
  EXPECT_EQ(story.out, ref.out);
  EXPECT_NE(story.err.find("verify: 3852 floats, 12 logits vectors and 13 tokens bit-identical to run.c"),
            std::string::npos)
      << story.err;
}

TEST(StoryCli, TemperatureOrToppOutsideTheSamplersWindowsIsAnError) {
  const std::string model = "--model '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin'";
  Result r = run_qpu("story " + model + " -n 2 -t 100 -p 1");  // outside the sampler's windows
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("temperatures in"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  r = run_qpu("story " + model + " -n 2 -t 1 -p 0.99999");  // run.c's cutoff below 2^-24: outside top-p's windows
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("flag -p"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

// A top-p story where more entries reach run.c's cutoff than the machine orders is refused
// before the machine is built (run.c's reference runs first), not in the middle of the story.
TEST(StoryCli, AToppStoryBeyondTheMachineIsRefusedBeforeTheBuild) {
  const std::string model = "--model '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin'";
  const Result r = run_qpu("story " + model + " -n 4 -t 1.8 -p 0.95 -s 3 --verify");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("at nested position 1 run.c's top-p keeps "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the machine orders at most 128: refused before the run"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("token machine for"), std::string::npos) << r.err;  // nothing was built
}

// QPU_ISA picks the engine's kernels (engine/dot.h): on every set this CPU has, the story
// is `qpu ref`'s bytes with every float verified, and its first line names the set. A set
// the kernels do not have, or one this CPU lacks, is an error before any work.
TEST(StoryCli, EveryInstructionSetWritesTheVerifiedStory) {
  namespace dot = qpu::engine::dot;
  const Result ref = run_qpu("ref '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin' -t 0 -n 3 -i Once");
  ASSERT_EQ(ref.status, 0) << ref.err;
  const std::string args =
      "story --model '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin' -n 3 -i Once --verify --threads 1";
  int ran = 0;
  for (const dot::Isa isa : {dot::Isa::Generic, dot::Isa::Avx2, dot::Isa::Avx512}) {
    const std::string name = dot::isa_name(isa);
    const Result story = run_qpu(args, "QPU_ISA=" + name);
    if (!dot::isa_supported(isa)) {
      EXPECT_EQ(story.status, 1) << name;
      EXPECT_NE(story.err.find("QPU_ISA=" + name + ": this CPU does not have"), std::string::npos) << story.err;
      EXPECT_TRUE(story.out.empty()) << name;
      continue;
    }
    ++ran;
    ASSERT_EQ(story.status, 0) << name << "\n" << story.err;
    EXPECT_EQ(story.out, ref.out) << name;
    EXPECT_NE(story.err.find(", " + name + " kernels)"), std::string::npos) << story.err;
    EXPECT_NE(story.err.find("logits vectors and 4 tokens bit-identical to run.c"), std::string::npos) << story.err;
  }
  EXPECT_GE(ran, 1);  // generic runs everywhere
  const Result bad = run_qpu(args, "QPU_ISA=sse9");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("qpu: QPU_ISA=sse9: not an instruction set the kernels have"), std::string::npos) << bad.err;
  EXPECT_TRUE(bad.out.empty());
}

TEST(StoryCli, BadFlagsAndFilesAreErrors) {
  const std::string model = "--model '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin'";
  Result r = run_qpu("story --model /nonexistent/model.bin -z '" + kModels + "tok512.bin' -n 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.bin"), std::string::npos) << r.err;
  r = run_qpu("story --model '" + kModels + "stories260K.bin' -z /nonexistent/tok.bin -n 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/nonexistent/tok.bin"), std::string::npos) << r.err;
  r = run_qpu("story " + model + " -n -3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("qpu: "), std::string::npos) << r.err;
  r = run_qpu("story " + model + " -n abc");
  EXPECT_NE(r.status, 0);
  r = run_qpu("story " + model + " -n 2 --threads -1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--threads"), std::string::npos) << r.err;
  r = run_qpu("story " + model + " -n 2 --build-threads -2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--build-threads"), std::string::npos) << r.err;
  r = run_qpu("story -n 2");  // no model
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(r.out.empty());
}

}  // namespace
