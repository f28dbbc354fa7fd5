#include "tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace qpu::tokenizer {
namespace {

struct MergeTarget {
  std::uint32_t rank = 0;
  std::int32_t new_id = 0;
};

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

// One symbol of the word being merged (tokenizers' Symbol); len == 0 marks a
// symbol absorbed by its left neighbour.
struct Symbol {
  std::int32_t id = 0;
  std::ptrdiff_t prev = -1;
  std::ptrdiff_t next = -1;
  std::size_t len = 0;
};

// A candidate merge in the queue; the lowest rank comes first, then the
// leftmost position (tokenizers' Merge ordering).
struct Candidate {
  std::size_t pos = 0;
  std::uint32_t rank = 0;
  std::int32_t new_id = 0;
};
struct LaterCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

class Bpe final : public Model {
 public:
  Bpe(Vocab vocab, std::unordered_map<std::uint64_t, MergeTarget> merges, std::optional<std::string> unk_token,
      bool fuse_unk, bool byte_fallback, bool ignore_merges)
      : vocab_(std::move(vocab)),
        merges_(std::move(merges)),
        unk_token_(std::move(unk_token)),
        fuse_unk_(fuse_unk),
        byte_fallback_(byte_fallback),
        ignore_merges_(ignore_merges) {}

  const Vocab& vocab() const override { return vocab_; }

  void tokenize(std::string_view piece, std::vector<std::int32_t>& ids) const override {
    if (piece.empty()) return;
    if (ignore_merges_) {
      if (const auto id = vocab_.find(piece)) {
        ids.push_back(*id);
        return;
      }
    }
    std::vector<Symbol> word = initial_symbols(piece);
    merge_all(word);
    for (const Symbol& s : word) {
      if (s.len != 0) ids.push_back(s.id);
    }
  }

 private:
  void add_symbol(std::vector<Symbol>& word, std::int32_t id, std::size_t len) const {
    Symbol s;
    s.id = id;
    s.len = len;
    if (!word.empty()) {
      s.prev = static_cast<std::ptrdiff_t>(word.size()) - 1;
      word.back().next = static_cast<std::ptrdiff_t>(word.size());
    }
    word.push_back(s);
  }

  std::int32_t unk_id() const {
    const auto id = vocab_.find(*unk_token_);
    if (!id) qpu::fail("BPE: unk_token \"{}\" is not in the vocabulary", *unk_token_);
    return *id;
  }

  // tokenizers' BPE::merge_word before merging: one symbol per character.
  std::vector<Symbol> initial_symbols(std::string_view piece) const {
    std::vector<Symbol> word;
    word.reserve(piece.size());
    // An unknown character waiting to become an unk symbol (tokenizers' `unk`).
    bool unk_pending = false;
    std::int32_t unk_pending_id = 0;
    std::size_t unk_pending_len = 0;
    std::size_t i = 0;
    while (i < piece.size()) {
      const std::size_t start = i;
      next_char(piece, i);
      const std::string_view ch = piece.substr(start, i - start);
      if (const auto id = vocab_.find(ch)) {
        if (unk_pending) {
          add_symbol(word, unk_pending_id, unk_pending_len);
          unk_pending = false;
        }
        add_symbol(word, *id, ch.size());
        continue;
      }
      if (byte_fallback_) {
        std::vector<std::int32_t> byte_ids;
        for (const char b : ch) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(b));
          const auto id = vocab_.find(name);
          if (!id) break;
          byte_ids.push_back(*id);
        }
        if (byte_ids.size() == ch.size()) {
          // Like tokenizers, a pending unk is not flushed here: it stays pending
          // and lands after these bytes.
          for (const std::int32_t id : byte_ids) add_symbol(word, id, 1);
          continue;
        }
      }
      if (unk_token_) {
        if (unk_pending && fuse_unk_) {
          unk_pending_len += ch.size();
        } else {
          if (unk_pending) add_symbol(word, unk_pending_id, unk_pending_len);
          unk_pending = true;
          unk_pending_id = unk_id();
          unk_pending_len = ch.size();
        }
      }
      // Without byte_fallback or unk_token, an unknown character is dropped.
    }
    if (unk_pending) add_symbol(word, unk_pending_id, unk_pending_len);
    return word;
  }

  const MergeTarget* find_merge(std::int32_t a, std::int32_t b) const {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  // tokenizers' Word::merge_all without dropout.
  void merge_all(std::vector<Symbol>& word) const {
    std::priority_queue<Candidate, std::vector<Candidate>, LaterCandidate> queue;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      if (const MergeTarget* m = find_merge(word[i].id, word[i + 1].id)) queue.push({i, m->rank, m->new_id});
    }
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& current = word[top.pos];
      if (current.len == 0 || current.next == -1) continue;
      const auto next_pos = static_cast<std::size_t>(current.next);
      const Symbol right = word[next_pos];
      const MergeTarget* still = find_merge(current.id, right.id);
      if (still == nullptr || still->new_id != top.new_id) continue;  // stale entry
      current.id = top.new_id;
      current.len += right.len;
      current.next = right.next;
      word[next_pos].len = 0;
      if (right.next > -1 && static_cast<std::size_t>(right.next) < word.size()) {
        word[static_cast<std::size_t>(right.next)].prev = static_cast<std::ptrdiff_t>(top.pos);
      }
      if (current.prev >= 0) {
        const auto prev = static_cast<std::size_t>(current.prev);
        if (const MergeTarget* m = find_merge(word[prev].id, current.id)) queue.push({prev, m->rank, m->new_id});
      }
      if (current.next >= 0) {
        const auto next = static_cast<std::size_t>(current.next);
        if (const MergeTarget* m = find_merge(current.id, word[next].id)) queue.push({top.pos, m->rank, m->new_id});
      }
    }
  }

  Vocab vocab_;
  std::unordered_map<std::uint64_t, MergeTarget> merges_;
  std::optional<std::string> unk_token_;
  bool fuse_unk_;
  bool byte_fallback_;
  bool ignore_merges_;
};

// One merge rule: "a b" (exactly one space) or ["a", "b"].
std::pair<std::string, std::string> parse_merge(const Json& item, const JsonPath& at) {
  if (item.is_string()) {
    const std::string line = item.get<std::string>();
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      at.fail("merge \"" + line + "\" must be two tokens separated by exactly one space");
    }
    return {line.substr(0, space), line.substr(space + 1)};
  }
  if (item.is_array() && item.size() == 2 && item[0].is_string() && item[1].is_string()) {
    return {item[0].get<std::string>(), item[1].get<std::string>()};
  }
  at.fail("expected a merge \"a b\" or [\"a\", \"b\"], found " + item.dump());
}

}  // namespace

std::unique_ptr<Model> parse_bpe(const Json& value, const JsonPath& at) {
  if (const auto dropout = value.find("dropout"); dropout != value.end() && !dropout->is_null()) {
    if (!dropout->is_number()) at.field("dropout").fail("expected a number or null");
    if (dropout->get<double>() != 0.0) at.field("dropout").fail("BPE dropout is random and not supported");
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto text = read_optional_string(value, field, at);
    if (text && !text->empty()) {
      at.field(field).fail("a non-empty " + std::string(field) + " is not supported");
    }
  }
  Vocab vocab = Vocab::parse(require_field(value, "vocab", at), at.field("vocab"));
  const JsonPath merges_at = at.field("merges");
  const Json& merges_json = value.contains("merges") ? value["merges"] : Json::array();
  if (!merges_json.is_array()) merges_at.fail("expected an array, found " + json_type_name(merges_json));
  std::unordered_map<std::uint64_t, MergeTarget> merges;
  merges.reserve(merges_json.size());
  // tokenizers reads either all "a b" strings or all pairs, never a mix.
  bool saw_string = false, saw_pair = false;
  for (const Json& item : merges_json) (item.is_string() ? saw_string : saw_pair) = true;
  if (saw_string && saw_pair) merges_at.fail("mixes \"a b\" strings and [a, b] pairs");
  std::uint32_t rank = 0;
  for (std::size_t i = 0; i < merges_json.size(); ++i) {
    const JsonPath item = merges_at.index(i);
    // The legacy text format may carry a "#version" header line; it has no rank.
    if (merges_json[i].is_string() && merges_json[i].get<std::string>().starts_with("#version")) continue;
    const auto [a, b] = parse_merge(merges_json[i], item);
    const auto a_id = vocab.find(a);
    const auto b_id = vocab.find(b);
    const auto new_id = vocab.find(a + b);
    if (!a_id) item.fail("merge token \"" + a + "\" is not in the vocabulary");
    if (!b_id) item.fail("merge token \"" + b + "\" is not in the vocabulary");
    if (!new_id) item.fail("merged token \"" + a + b + "\" is not in the vocabulary");
    // A repeated pair takes the later rank, as tokenizers' HashMap collect does.
    merges[pair_key(*a_id, *b_id)] = MergeTarget{rank, *new_id};
    ++rank;
  }
  return std::make_unique<Bpe>(std::move(vocab), std::move(merges), read_optional_string(value, "unk_token", at),
                               read_bool(value, "fuse_unk", at, false), read_bool(value, "byte_fallback", at, false),
                               read_bool(value, "ignore_merges", at, false));
}

}  // namespace qpu::tokenizer
