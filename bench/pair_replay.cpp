// What the second core gives when every guess is right (docs/engine.md, "Forward pairs"):
// replays a recorded host token stream of the stories260K token machine (story_profile's
// QPU_HOST_TOKENS file) from a fresh state, three ways, and times each:
//   sequential  forward() of every token, one at a time;
//   journaled   the same with a StateJournal on every forward (the journal's own cost);
//   pairs       forward_pair(t_i, t_i+1) for i = 0, 2, 4, ...: every draft right, so the
//               time is the pair mechanism's best case, without drafting or undo.
// Every forward's logits are compared with the sequential run's argmax (the token that
// followed in the stream) and the last logits vector bit for bit: a difference is an error.
//
//   pair_replay TOKENS [positions=256] [forwards=all] [threads=1] [modes=sjp]
//
// modes: the letters of the modes to run (s, j, p); the sequential run always runs first
// (the others compare with it), timed only when s is given. Two sequential runs side by
// side in two processes say what the two cores give when nothing is shared but the
// memory system.
//
// A measurement, not a test.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/elementwise.h"
#include "machine/token_machine.h"
#include "reference/llama2_checkpoint.h"
#include "runner/story_stream.h"

int main(int argc, char** argv) {
  using namespace qpu;
  if (argc < 2) {
    std::fprintf(stderr, "usage: pair_replay TOKENS [positions=256] [forwards=all] [threads=1] [modes=sjp]\n");
    return 1;
  }
  const int positions = argc > 2 ? std::atoi(argv[2]) : 256;
  const long limit = argc > 3 ? std::atol(argv[3]) : 0;
  omp_set_num_threads(argc > 4 ? std::atoi(argv[4]) : 1);
  const std::string modes = argc > 5 ? argv[5] : "sjp";
  std::vector<int64_t> tokens;
  {
    std::ifstream in(argv[1]);
    int64_t id = 0;
    std::string name;
    while (in >> id >> name) tokens.push_back(id);
  }
  if (limit > 0 && static_cast<size_t>(limit) < tokens.size()) tokens.resize(static_cast<size_t>(limit));
  tokens.resize(tokens.size() / 2 * 2);  // whole pairs
  if (tokens.size() < 2) {
    std::fprintf(stderr, "pair_replay: %s holds fewer than 2 tokens\n", argv[1]);
    return 1;
  }
  try {
    const reference::Llama2Checkpoint ck = reference::load_llama2_checkpoint(QPU_SHARED_DIR "/models/stories260K/stories260K.bin");
    const machine::TokenMachine m = machine::build_token_machine(ck, runner::token_machine_options(positions));
    engine::ModelOptions mo;
    mo.build_threads = omp_get_num_procs();
    const engine::Model model = m.model(mo);
    const auto vocab = static_cast<size_t>(model.config().vocab_size);
    std::printf("pair_replay: %zu forwards on the %d-position machine (%lld layers, hidden %lld)\n", tokens.size(),
                positions, static_cast<long long>(model.config().num_hidden_layers),
                static_cast<long long>(model.config().hidden_size));
    const auto argmax = [&](const std::vector<float>& l) {
      return engine::elementwise::kernels().argmax(l.data(), static_cast<int64_t>(l.size()), 0x1p20f, nullptr);
    };
    // The stream's own next token is the host's argmax (the forwards of a prompt excepted:
    // the first few tokens are forced), so only the count of disagreements is reported.
    const auto timed = [&](const char* mode, auto&& body) {
      if (modes.find(mode[0]) == std::string::npos && mode[0] != 's') return;
      const auto start = std::chrono::steady_clock::now();
      const long misses = body();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (modes.find(mode[0]) == std::string::npos) return;
      std::printf("%-11s %8.1f s  %7.1f forwards/s  (%ld argmaxes differ from the stream: the prompt's)\n", mode, s,
                  static_cast<double>(tokens.size()) / s, misses);
      std::fflush(stdout);
    };
    std::vector<float> last_sequential(vocab), logits(vocab), second(vocab);
    timed("sequential", [&] {
      engine::State state = model.new_state();
      long misses = 0;
      for (size_t i = 0; i < tokens.size(); ++i) {
        model.forward(tokens[i], state, logits);
        if (i + 1 < tokens.size() && argmax(logits) != tokens[i + 1]) ++misses;
      }
      last_sequential = logits;
      return misses;
    });
    engine::StateJournal journal;
    timed("journaled", [&] {
      engine::State state = model.new_state();
      long misses = 0;
      for (size_t i = 0; i < tokens.size(); ++i) {
        model.forward(tokens[i], state, logits, journal);
        if (i + 1 < tokens.size() && argmax(logits) != tokens[i + 1]) ++misses;
      }
      if (std::memcmp(logits.data(), last_sequential.data(), vocab * sizeof(float)) != 0)
        throw std::runtime_error("journaled: the last logits differ from the sequential run's");
      return misses;
    });
    timed("pairs", [&] {
      engine::State state = model.new_state();
      long misses = 0;
      for (size_t i = 0; i < tokens.size(); i += 2) {
        model.forward_pair(tokens[i], tokens[i + 1], state, logits, second, journal);
        if (argmax(logits) != tokens[i + 1]) ++misses;
        if (i + 2 < tokens.size() && argmax(second) != tokens[i + 2]) ++misses;
      }
      if (std::memcmp(second.data(), last_sequential.data(), vocab * sizeof(float)) != 0)
        throw std::runtime_error("pairs: the last logits differ from the sequential run's");
      return misses;
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pair_replay: %s\n", e.what());
    return 1;
  }
  return 0;
}
