// The story machine's description (machine/story_interface.h) and the story pipeline that
// `qpu story`, `qpu run`, `qpu prompt` and `qpu verify` share (runner/story_session.h), on
// the real stories260K token machine:
//  * the description written as JSON and read back drives the machine exactly as the
//    machine itself does (every control id, the value tokens of many floats both ways, the
//    host prompts of greedy and sampled stories); a damaged description is refused, naming
//    what is wrong;
//  * the pipeline's dumps: every nested logits vector it writes equals run.c's logits bit
//    for bit, and the host token file is the prompt followed by the generated stream;
//  * the story tokenizer (machine/story_tokenizer.h): decoding story tokens between
//    other host tokens gives what run.c prints for those nested tokens, for every first
//    token and many random stories, and the machine's own host stream decodes to its story;
//  * `qpu prompt DIR` reads only qpu-machine.json and nested-tokenizer.bin and prints the
//    machine's prompt; `qpu run` refuses a directory without a description or weights,
//    and flags the machine does not hold, before any work.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <span>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/testing/run_command.h"
#include "common/testing/scratch_files.h"
#include "io/qwen35_save.h"
#include "machine/machine_checkpoint.h"
#include "machine/story_interface.h"
#include "machine/story_tokenizer.h"
#include "machine/token_machine.h"
#include "reference/llama2_checkpoint.h"
#include "reference/tokenizer.h"
#include "reference/transformer.h"
#include "runner/story_session.h"
#include "runner/story_stream.h"
#include "tokenizer/tokenizer.h"

namespace qpu::runner {
namespace {

namespace fs = std::filesystem;
using machine::StoryInterface;

const std::string kModels = std::string(QPU_SHARED_DIR) + "/models/stories260K/";

const reference::Llama2Checkpoint& stories260k() {
  static const reference::Llama2Checkpoint ck = reference::load_llama2_checkpoint(kModels + "stories260K.bin");
  return ck;
}

const reference::Tokenizer& tok512() {
  static const reference::Tokenizer t = reference::Tokenizer::load(kModels + "tok512.bin", 512);
  return t;
}

// The 16-position machines: greedy, and run.c's top-p for p = 0.9.
const machine::TokenMachine& greedy_machine() {
  static const machine::TokenMachine m = machine::build_token_machine(stories260k(), token_machine_options(16));
  return m;
}
const machine::TokenMachine& topp_machine() {
  static const machine::TokenMachine m = [] {
    machine::TokenMachineOptions o = token_machine_options(16);
    o.sampling = true;
    o.sample.topp = 0.9f;
    return machine::build_token_machine(stories260k(), o);
  }();
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const qpu::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(StoryInterface, ReadBackItDrivesTheMachineAsTheMachineDoes) {
  for (const machine::TokenMachine* m : {&greedy_machine(), &topp_machine()}) {
    const StoryInterface made = m->story_interface();
    const StoryInterface back = StoryInterface::from_json(nlohmann::json::parse(made.to_json().dump()), "test");
    EXPECT_EQ(back.to_json(), made.to_json());
    for (const std::string& name : m->control_names) ASSERT_EQ(back.id(name), m->id(name)) << name;
    EXPECT_EQ(back.done(), m->done());
    ASSERT_EQ(back.logit_probes().size(), m->logit_probes.size());
    for (size_t i = 0; i < m->logit_probes.size(); ++i) {
      EXPECT_EQ(back.logit_probes()[i].after_sublayer, m->logit_probes[i].after_sublayer);
      EXPECT_EQ(back.logit_probes()[i].dim, m->logit_probes[i].dim);
    }
    // Floats of the uplink's window, both ways, against the assembled machine's own.
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int> binade(-47, 19);
    std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
    for (int i = 0; i < 20000; ++i) {
      const uint32_t bits = (static_cast<uint32_t>(binade(rng) + 127) << 23) | mantissa(rng) | (i % 2 ? 0x80000000u : 0u);
      const float x = std::bit_cast<float>(bits);
      const std::vector<int64_t> t = back.value_tokens(x);
      ASSERT_EQ(t, m->value_tokens(x)) << x;
      ASSERT_EQ(std::bit_cast<uint32_t>(back.decode(t[0], t[1], t[2])), bits) << x;
    }
    // Host prompts: BOS alone, a prompt, steps at the machine's limit.
    const float t = m->sample_blocks > 0 ? 0.8f : 0.0f;
    for (const std::string& text : {std::string(), std::string("Once upon a time"), std::string("Lily")}) {
      const std::vector<int> nested = tok512().encode(text, true, false);
      for (int steps : {1, 7, 16}) {
        EXPECT_EQ(back.prompt(nested, steps, t, 42), m->prompt(nested, steps, t, 42)) << text;
      }
    }
  }
  EXPECT_EQ(greedy_machine().story_interface().sampler(), machine::SamplerKind::Greedy);
  EXPECT_EQ(topp_machine().story_interface().sampler(), machine::SamplerKind::TopP);
  EXPECT_EQ(topp_machine().story_interface().fields().topp, 0.9f);
}

TEST(StoryInterface, ADamagedDescriptionIsRefusedNamingWhatIsWrong) {
  const nlohmann::json good = topp_machine().story_interface().to_json();
  const auto refused = [&](const std::function<void(nlohmann::json&)>& damage) {
    nlohmann::json j = good;
    damage(j);
    return error_of([&] { (void)StoryInterface::from_json(j, "DIR/qpu-machine.json"); });
  };
  EXPECT_NE(refused([](nlohmann::json& j) { j["format"] = "qpu-story-interface-v0"; }).find("format 'qpu-story-interface-v0'"),
            std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) { j.erase("controls"); }).find("'controls' is missing"), std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) { j["positions"] = "16"; }).find("'positions' has the wrong type"),
            std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) { j["host_vocab_size"] = j["host_vocab_size"].get<int64_t>() + 1; })
                .find("a host vocabulary of"),
            std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) {
              auto& c = j["controls"];
              for (auto& n : c)
                if (n == "TOK.5") n = "TOK.x";
            }).find("no control token 'TOK.5'"),
            std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) { j["controls"][3] = j["controls"][4]; }).find("repeats"), std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) { j["sampler"]["kind"] = "beam"; }).find("sampler 'beam'"), std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) { j["sampler"]["topp"] = 1.0; }).find("a top-p machine for p = 1"),
            std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) { j["logit_probes"].erase(0); }).find("511 logit probes"), std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) { j["logit_probes"][0] = {1, 2, 3}; }).find("a logit probe of 3 numbers"),
            std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) { j["value_tokens"]["jmax"] = -100; }).find("value window"), std::string::npos);
  EXPECT_EQ(error_of([&] { (void)StoryInterface::from_json(nlohmann::json::array(), "x"); }),
            "x: interface: not a JSON object");
}

TEST(StoryInterface, PlansRefuseWhatTheMachineDoesNotHold) {
  const StoryInterface greedy = greedy_machine().story_interface(), topp = topp_machine().story_interface();
  StoryRequest r;
  r.steps = 8;
  r.temperature = 1.0f;
  EXPECT_NE(error_of([&] { (void)plan_story(greedy, tok512(), r); }).find("this machine is greedy"), std::string::npos);
  r.topp = 0.8f;
  EXPECT_NE(error_of([&] { (void)plan_story(topp, tok512(), r); }).find("p = 0.9 only, not 0.8"), std::string::npos);
  r.topp = 1.0f;
  EXPECT_NE(error_of([&] { (void)plan_story(topp, tok512(), r); }).find("p = 0.9 only"), std::string::npos);
  r = StoryRequest{};
  r.steps = 17;
  EXPECT_NE(error_of([&] { (void)plan_story(greedy, tok512(), r); }).find("17 nested positions, the machine serves 16"),
            std::string::npos);
  r.steps = 0;  // run.c: seq_len (512), more than the machine serves
  EXPECT_NE(error_of([&] { (void)plan_story(greedy, tok512(), r); }).find("512 nested positions"), std::string::npos);
  r.steps = 5;
  r.prompt = "Once upon a time";
  const StoryPlan plan = plan_story(greedy, tok512(), r);
  EXPECT_EQ(plan.steps, 5);
  EXPECT_EQ(plan.nested_prompt, tok512().encode("Once upon a time", true, false));
  EXPECT_EQ(plan.host_prompt, greedy_machine().prompt(plan.nested_prompt, 5));
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(StorySession, DumpsRunCsLogitsAndTheHostStream) {
  const machine::TokenMachine& m = greedy_machine();
  const engine::Model model = m.model();
  const StoryInterface interface = m.story_interface();
  StoryRequest r;
  r.steps = 2;
  r.prompt = "Once";
  const StoryPlan plan = plan_story(interface, tok512(), r);
  testing::ScratchDir scratch;
  StorySessionOptions o;
  o.verify_against = &stories260k();
  o.dump_logits = (scratch / "logits.bin").string();
  o.dump_host_tokens = (scratch / "host.txt").string();
  o.speculate = false;
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  o.out = out;
  const StorySessionResult result = run_story_session(interface, model, tok512(), plan, r, o);
  EXPECT_TRUE(result.verified);
  EXPECT_EQ(result.logit_vectors_verified, 2);
  // The story as run.c prints it.
  std::rewind(out);
  char text[256] = {};
  const size_t n = std::fread(text, 1, sizeof text - 1, out);
  std::fclose(out);
  reference::Transformer t(stories260k());
  std::vector<std::vector<float>> logits;
  std::string expected;
  std::vector<int> tokens = plan.nested_prompt;
  {
    int prev = tokens[0];
    for (int pos = 0; pos < 2; ++pos) {
      const std::span<float> l = t.forward(tokens[static_cast<size_t>(pos)], pos);
      logits.emplace_back(l.begin(), l.end());
      int next = static_cast<size_t>(pos + 1) < tokens.size()
                     ? tokens[static_cast<size_t>(pos + 1)]
                     : static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
      if (static_cast<size_t>(pos + 1) >= tokens.size()) tokens.push_back(next);
      expected += reference::printable_piece(tok512().decode(prev, next));
      prev = next;
    }
  }
  EXPECT_EQ(std::string(text, n), expected + "\n");
  // Every nested logits vector, bit for bit, in run.c's layout.
  const std::string dumped = read_all(scratch / "logits.bin");
  ASSERT_EQ(dumped.size(), 2 * 512 * sizeof(float));
  for (size_t p = 0; p < 2; ++p)
    EXPECT_EQ(std::memcmp(dumped.data() + p * 512 * sizeof(float), logits[p].data(), 512 * sizeof(float)), 0) << p;
  // The host stream: the prompt, then what the machine generated, ending in the last
  // position's story token (the run stops there).
  std::vector<int64_t> host;
  std::istringstream lines(read_all(scratch / "host.txt"));
  for (int64_t id; lines >> id;) host.push_back(id);
  ASSERT_GT(host.size(), plan.host_prompt.size());
  EXPECT_TRUE(std::equal(plan.host_prompt.begin(), plan.host_prompt.end(), host.begin()));
  EXPECT_EQ(static_cast<int64_t>(host.size()), result.run.host_forwards + 1);  // the last generated one is not fed
  const std::string last = m.control_names.at(static_cast<size_t>(host.back() - m.control.first));
  EXPECT_EQ(last, "TOK." + std::to_string(tokens.back()));
  EXPECT_FALSE(fs::exists(scratch / ("logits.bin.tmp-" + std::to_string(getpid()))));
  // The generated host tokens, decoded with the story tokenizer, are the story.
  fs::path tokenizer_json = scratch / "tokenizer.json";
  testing::write_file(tokenizer_json, machine::story_tokenizer_json(interface, tok512()));
  const tokenizer::Tokenizer decoder = tokenizer::Tokenizer::load(tokenizer_json);
  const std::vector<int32_t> generated(host.begin() + static_cast<std::ptrdiff_t>(plan.host_prompt.size()), host.end());
  EXPECT_EQ(decoder.decode(generated, true), expected);
}

// run.c's stdout for a nested token stream that starts with BOS (without the final
// newline): each piece after the first, the first one after BOS stripped, up to a BOS.
std::string run_c_text(const std::vector<int>& tokens) {
  std::string text;
  for (size_t i = 1; i < tokens.size() && tokens[i] != 1; ++i)
    text += reference::printable_piece(tok512().decode(tokens[i - 1], tokens[i]));
  return text;
}

TEST(StoryTokenizer, DecodesStoryTokensAsRunCPrintsThem) {
  const StoryInterface m = greedy_machine().story_interface();
  testing::ScratchDir scratch;
  testing::write_file(scratch / "tokenizer.json", machine::story_tokenizer_json(m, tok512()));
  const tokenizer::Tokenizer decoder = tokenizer::Tokenizer::load(scratch / "tokenizer.json");
  auto story_id = [&](int k) { return static_cast<int32_t>(m.id("TOK." + std::to_string(k))); };
  const auto host_vocab = static_cast<int32_t>(m.fields().host_vocab);
  auto is_story_token = [&](int32_t id) {
    const int64_t c = id - m.first_control();
    return c >= 0 && m.controls()[static_cast<size_t>(c)].starts_with("TOK.");
  };
  std::mt19937_64 rng(30);
  // A stream of story tokens for `tokens` (from BOS), each preceded by up to 5 other host
  // tokens (value and control tokens), as a machine's stream has them.
  auto stream_of = [&](const std::vector<int>& tokens) {
    std::vector<int32_t> ids;
    for (size_t i = 1; i < tokens.size(); ++i) {
      for (uint64_t n = rng() % 6; n > 0; --n) {
        int32_t other = 0;
        do other = static_cast<int32_t>(rng() % static_cast<uint64_t>(host_vocab));
        while (is_story_token(other));
        ids.push_back(other);
      }
      ids.push_back(story_id(tokens[i]));
      if (tokens[i] == 1) break;
    }
    return ids;
  };
  int checked = 0;
  // Every nested token as the first one (the stripped leading space), then another.
  for (int k = 0; k < 512; ++k) {
    const std::vector<int> tokens{1, k, static_cast<int>(rng() % 512)};
    ASSERT_EQ(decoder.decode(stream_of(tokens), true), run_c_text(tokens)) << "first token " << k;
    ++checked;
  }
  // Random stories (a BOS among them ends the text).
  for (int c = 0; c < 2000; ++c) {
    std::vector<int> tokens{1};
    for (uint64_t n = 1 + rng() % 12; n > 0; --n) tokens.push_back(static_cast<int>(rng() % 512));
    ASSERT_EQ(decoder.decode(stream_of(tokens), true), run_c_text(tokens)) << "story " << c;
    ++checked;
  }
  EXPECT_EQ(checked, 2512);
}

// The machine map (qpu-machine.json's "map"): the families count every control token
// once, and every GDN memory of the program is listed once, at the layer and head the
// compiler gave it, with its address bits and row width.
TEST(MachineMap, ListsEveryFamilyAndMemoryWhereTheCompilerPutIt) {
  const machine::TokenMachine& m = greedy_machine();
  const nlohmann::json map = machine::machine_map(m);
  int64_t tokens = 0;
  for (const auto& [family, count] : map.at("families").items()) tokens += count.get<int64_t>();
  EXPECT_EQ(tokens, static_cast<int64_t>(m.control_names.size()));
  EXPECT_EQ(map.at("families").at("SCORE(#).#"), 16 / 8 * 5);  // 2 blocks of 8 positions, 5 layers
  EXPECT_EQ(map.at("families").at("TOK.#"), 512);
  const auto& ops = m.program.ops();
  size_t listed = 0;
  std::set<std::pair<int64_t, int64_t>> places;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != compiler::OpKind::GdnMemory) continue;
    const nlohmann::json& entry = map.at("memories").at(listed++);
    EXPECT_EQ(entry.at("label"), ops[i].label);
    const int64_t layer = entry.at("layer"), head = entry.at("head");
    EXPECT_EQ(layer, m.compiled.schedule.sublayer[i] / 2);
    EXPECT_GE(head, 0);
    EXPECT_LT(head, m.compiled.allocation.num_gdn_heads);
    EXPECT_TRUE(places.insert({layer, head}).second) << "two memories in layer " << layer << " head " << head;
    EXPECT_EQ(entry.at("address_bits"), ops[i].gdn.key_bits.size());
    EXPECT_EQ(entry.at("floats_per_row"), ops[i].gdn.data.size());
  }
  EXPECT_EQ(listed, map.at("memories").size());
  EXPECT_GT(listed, 100u);
}

TEST(StoryTokenizer, RefusesATokenizerOfAnotherVocabulary) {
  const StoryInterface m = greedy_machine().story_interface();
  testing::ScratchDir scratch;
  // A run.c tokenizer.bin of 300 pieces: max_token_length, then per piece score, length, bytes.
  std::string bin;
  auto put = [&](const auto& v) { bin.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(int32_t{8});
  for (int i = 0; i < 300; ++i) {
    const std::string piece = "t" + std::to_string(i);
    put(0.0f);
    put(static_cast<int32_t>(piece.size()));
    bin += piece;
  }
  testing::write_file(scratch / "tok300.bin", bin);
  const reference::Tokenizer other = reference::Tokenizer::load(scratch / "tok300.bin", 300);
  EXPECT_NE(error_of([&] { (void)machine::story_tokenizer_json(m, other); }).find("nested vocabulary is 512"),
            std::string::npos);
  const nlohmann::json config = machine::story_tokenizer_config(m);
  EXPECT_EQ(config.at("eos_token"), "<|qpu:DONE|>");
  EXPECT_EQ(config.at("clean_up_tokenization_spaces"), false);
}

testing::CommandResult run_qpu(const std::string& args) {
  return testing::run_command("'" + std::string(QPU_BINARY) + "' " + args,
                              fs::temp_directory_path() / ("qpu-files-test-" + std::to_string(getpid()) + ".err"));
}

// A directory with the machine's description and run.c's tokenizer, no weights.
void write_description(const fs::path& dir, const machine::TokenMachine& m) {
  fs::create_directory(dir);
  std::ofstream(dir / machine::kMachineFileName) << nlohmann::json{{"interface", m.story_interface().to_json()}}.dump();
  fs::copy_file(kModels + "tok512.bin", dir / machine::kNestedTokenizerFileName);
}

TEST(StoryFilesCli, PromptReadsOnlyTheDescription) {
  testing::ScratchDir scratch;
  const fs::path dir = scratch / "ckpt";
  write_description(dir, topp_machine());
  const auto r = run_qpu("prompt '" + dir.string() + "' -n 12 -i 'Lily' -t 0.8 -p 0.9 -s 7");
  ASSERT_EQ(r.status, 0) << r.err;
  std::string expected;
  for (int64_t id : topp_machine().prompt(tok512().encode("Lily", true, false), 12, 0.8f, 7))
    expected += (expected.empty() ? "" : " ") + std::to_string(id);
  EXPECT_EQ(r.out, expected + "\n");
  // Flags the machine does not hold are refused.
  const auto bad = run_qpu("prompt '" + dir.string() + "' -t 0.8 -p 0.5 -s 7");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("p = 0.9 only, not 0.5"), std::string::npos) << bad.err;
}

TEST(StoryFilesCli, RunRefusesADirectoryItCannotDrive) {
  testing::ScratchDir scratch;
  const fs::path empty = scratch / "empty";
  fs::create_directory(empty);
  const auto none = run_qpu("run '" + empty.string() + "' -n 2");
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("qpu-machine.json: missing: not a compiled story checkpoint"), std::string::npos) << none.err;
  const fs::path broken = scratch / "broken";
  fs::create_directory(broken);
  std::ofstream(broken / machine::kMachineFileName) << "{\"interface\": {\"format\": ";
  const auto bad_json = run_qpu("run '" + broken.string() + "' -n 2");
  EXPECT_EQ(bad_json.status, 1);
  EXPECT_NE(bad_json.err.find("not valid JSON"), std::string::npos) << bad_json.err;
  // A description without weights: the load names the missing file.
  const fs::path weightless = scratch / "weightless";
  write_description(weightless, greedy_machine());
  const auto no_weights = run_qpu("run '" + weightless.string() + "' -n 2");
  EXPECT_EQ(no_weights.status, 1);
  EXPECT_NE(no_weights.err.find("config.json"), std::string::npos) << no_weights.err;
  EXPECT_TRUE(no_weights.out.empty());
  // config.json is checked against the description before the weights are read: one
  // whose vocabulary differs is named, although the shards are missing too.
  io::Qwen35Config config = greedy_machine().compiled.weights.config;
  config.vocab_size += 1;
  testing::write_file(weightless / "config.json", io::qwen35_config_to_json(config).dump());
  const auto other_vocab = run_qpu("run '" + weightless.string() + "' -n 2");
  EXPECT_EQ(other_vocab.status, 1);
  EXPECT_NE(other_vocab.err.find("config.json has a vocabulary of " + std::to_string(config.vocab_size)),
            std::string::npos)
      << other_vocab.err;
  // Flags are checked before the load: -t on a greedy machine.
  const auto sampled = run_qpu("run '" + weightless.string() + "' -n 2 -t 1");
  EXPECT_EQ(sampled.status, 1);
  EXPECT_NE(sampled.err.find("this machine is greedy"), std::string::npos) << sampled.err;
}

}  // namespace
}  // namespace qpu::runner
