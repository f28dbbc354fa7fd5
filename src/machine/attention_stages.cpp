#include "machine/attention_stages.h"

#include <algorithm>
#include <functional>
#include <string>
#include <tuple>

#include "common/error.h"
#include "compiler/enable.h"
#include "machine/carry_crossing.h"
#include "npu/expf.h"
#include "npu/float_ram.h"
#include "npu/kv_address.h"
#include "npu/primitives.h"
#include "npu/unit_attention.h"

namespace qpu::machine {

using compiler::kOne;
using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

constexpr float kProbSplit = 0x1p-22f, kProbSmallScale = 0x1p30f;

std::string name(const char* prefix, int i) { return std::string(prefix) + "." + std::to_string(i); }
std::string layer_name(const char* prefix, int l) { return std::string(prefix) + "(" + std::to_string(l) + ")"; }
std::string block_name(const char* prefix, int l, int b) { return layer_name(prefix, l) + "." + std::to_string(b); }

std::string slow_name(int l, int h, int s) { return block_name("SLOW", l, h) + "." + std::to_string(s); }

size_t at(int i) { return static_cast<size_t>(i); }

// out[i] = the sum of sources[.][i] for values that are exactly 0 or 1, at most one of
// them 1 (address sources of one RAM: a computed one and tokens'), one neuron each, no
// constant.
std::vector<ValueId> any_of(Assembler& as, const std::vector<std::vector<ValueId>>& sources,
                            const std::string& label) {
  compiler::Program& p = as.program();
  std::vector<ValueId> out = p.values(label, static_cast<int>(sources[0].size()));
  std::vector<Neuron> ns;
  for (size_t i = 0; i < out.size(); ++i) {
    Lin gate, up;
    for (const auto& src : sources) {
      gate.terms.push_back({src[i], 128.0f});
      up.terms.push_back({src[i], 1.0f / 128.0f});
    }
    ns.push_back(Neuron{gate, up, {{out[i], 1.0f}}});
  }
  p.mlp(label, std::move(ns));
  as.gate_own_clears(out);  // exactly 0 or 1
  return out;
}
std::vector<ValueId> either(Assembler& as, const std::vector<ValueId>& a, const std::vector<ValueId>& b,
                            const std::string& label) {
  return any_of(as, {a, b}, label);
}

// Sum over the slots (one of them was read, the others are +0) for each value, when `flag`.
std::vector<ValueId> slot_sum(compiler::Program& p, const std::vector<std::vector<ValueId>>& slots, ValueId flag,
                              const std::string& label) {
  std::vector<ValueId> out = p.values(label, static_cast<int>(slots[0].size()));
  std::vector<Neuron> ns;
  for (size_t n = 0; n < out.size(); ++n)
    for (const auto& s : slots) ns.push_back(Neuron{Lin{{{flag, 128.0f}}}, Lin{{{s[n], 1.0f / 128.0f}}}, {{out[n], 1.0f}}});
  p.mlp(label, std::move(ns));
  return out;
}

// 8 b of a token from its row bits and bank group flags (the cache's layout).
Lin block_base(const std::vector<ValueId>& row, const std::vector<ValueId>& group, int banks) {
  Lin b;
  for (size_t j = 0; j < row.size(); ++j) b.terms.push_back({row[j], static_cast<float>(banks << j)});
  for (size_t g = 1; g < group.size(); ++g) b.terms.push_back({group[g], static_cast<float>(8 * g)});
  return b;
}

// [base + o > pos]: position base + o (base a linear form of the token's 0/1 flags) lies
// past POS. Exactly 0 or 1.
ValueId position_past(compiler::Program& p, Lin base, int o, ValueId pos, const char* label) {
  base.terms.push_back({kOne, static_cast<float>(o)});
  base.terms.push_back({pos, -1.0f});
  return npu::attn_int_positive(p, base, label);
}

// [8 b + s > pos] for s = 1..7 (entry 0 unused: row 0 of a block is never past POS when
// the block runs), with 8 b = banks row + 8 group from the token's 0/1 flags.
std::vector<ValueId> rows_past(compiler::Program& p, const std::vector<ValueId>& row, const std::vector<ValueId>& group,
                               int banks, ValueId pos) {
  std::vector<ValueId> past(8, compiler::kNever);
  for (int s = 1; s < 8; ++s) past[at(s)] = position_past(p, block_base(row, group, banks), s, pos, "attn.past");
  return past;
}

// s W for a chain segment's token, from its one-hot segment flags (segment 0: the empty form).
Lin segment_base(const std::vector<ValueId>& segment, int width) {
  Lin base;
  for (size_t s = 1; s < segment.size(); ++s) base.terms.push_back({segment[s], static_cast<float>(s) * static_cast<float>(width)});
  return base;
}

// The block loops' branch condition: [pos >= 8 b + span] (a block after b holds a position
// up to POS) AND the stage runs, with 8 b = the linear form `base` of the token's flags
// (span: the positions the token covers, 8 for a block). Built outside the stage's enable
// range: its constants must stay 1, and `on` makes it 0 on every other cycle.
ValueId more_blocks(compiler::Program& p, const Lin& base, ValueId on, ValueId pos, int span = 8) {
  Lin d{{{pos, 1.0f}, {kOne, 1.0f - static_cast<float>(span)}}};
  for (const auto& t : base.terms) d.terms.push_back({t.value, -t.weight});
  const ValueId more = npu::attn_int_positive(p, d, "attn.more");
  return npu::attn_int_positive(p, Lin{{{more, 1.0f}, {on, 1.0f}, {kOne, -1.0f}}}, "attn.more_on");
}

// For a chain in segments: flags[i] when the chain stops this cycle (`more` 0), else +-0:
// silu(128 (flag - more)) flag / 128, one op, each output exactly 0 or 1.
std::vector<ValueId> stop_flags(Assembler& as, const std::vector<ValueId>& flags, ValueId more, const std::string& label) {
  compiler::Program& p = as.program();
  std::vector<ValueId> out = p.values(label, static_cast<int>(flags.size()));
  std::vector<Neuron> ns;
  for (size_t i = 0; i < flags.size(); ++i)
    ns.push_back(Neuron{Lin{{{flags[i], 128.0f}, {more, -128.0f}}}, Lin{{{flags[i], 1.0f / 128.0f}}}, {{out[i], 1.0f}}});
  p.mlp(label, std::move(ns));
  as.gate_own_clears(out);
  return out;
}

// A banked float RAM (the cache's layout): group g's 8 heads (banks 8 g + s) store
// data[s] at row `key_bits` when write[g] is set (wiped first when wipe[g] is), and read
// row `query_bits` when read[8 g + s] is set into slot s (one bank reads at a time).
std::vector<std::vector<ValueId>> banked_ram(compiler::Program& p, int low_binade,
                                             const std::vector<std::vector<ValueId>>& data,
                                             const std::vector<ValueId>& key_bits, const std::vector<ValueId>& write,
                                             const std::vector<ValueId>& wipe, const std::vector<ValueId>& query_bits,
                                             const std::vector<ValueId>& read, ValueId enable, const std::string& label) {
  std::vector<npu::FloatRamHead> by_slot(8);
  for (size_t s = 0; s < 8; ++s) by_slot[s].data = data[s];
  const auto negated = npu::float_ram_negations(p, by_slot, enable, label);
  std::vector<std::vector<ValueId>> slots;
  for (int s = 0; s < 8; ++s) slots.push_back(p.values(label + ".slot" + std::to_string(s), static_cast<int>(data[0].size())));
  for (size_t g = 0; g < write.size(); ++g) {
    std::vector<npu::FloatRamHead> heads;
    for (size_t s = 0; s < 8; ++s) {
      npu::FloatRamHead h;
      h.data = data[s];
      h.negated = negated[s];
      h.key_bits = key_bits;
      h.write_flag = write[g];
      h.wipe_flag = wipe[g];
      h.query_bits = query_bits;
      h.read_flag = read[g * 8 + s];
      h.out = slots[s];
      heads.push_back(std::move(h));
    }
    npu::float_ram(p, npu::FloatRamWindow{low_binade}, heads, enable, label + " banks " + std::to_string(g * 8) + "+");
  }
  return slots;
}

constexpr float kGateOn = 128.0f;  // silu(128) == 128: a gate of 128 flag passes a value exactly
// SLOW: block b's products start after this many rows of block b - 1's chain (7 MLP
// sublayers each; the products take 34 of the chain's 56).
constexpr size_t kProductsLead = 2;

// Ops [first, end) in waves: each wave's ops after the previous wave's.
void order_waves(compiler::Program& p, const std::vector<compiler::OpRange>& waves) {
  for (size_t w = 1; w < waves.size(); ++w) p.order(waves[w - 1], waves[w]);
}

// The ops of a RAM head (its memories) and the flag it is read with: its out values are +0
// whenever that flag is, so their dead-value clears read it.
struct HeadOps {
  size_t begin, end;
  ValueId read;
};

}  // namespace

std::vector<std::string> AttentionStages::names(const AttentionGeometry& g) {
  std::vector<std::string> n;
  for (int l = 0; l < g.layers; ++l) {
    for (int b = 0; b < g.blocks(); ++b) n.push_back(block_name("SCORE", l, b));
    n.push_back(layer_name("MAX", l));
    for (int b = 0; b < g.blocks(); ++b)
      for (int hg = 0; hg < g.exp_groups(); ++hg) n.push_back(block_name("EXP", l, b) + "." + std::to_string(hg));
  }
  for (int l = 0; l < g.layers; ++l)
    for (int h = 0; h < g.heads; ++h)
      for (int seg = 0; seg < g.sum_segments(); ++seg) n.push_back(block_name("SUM", l, h) + "." + std::to_string(seg));
  for (int l = 0; l < g.layers; ++l)
    for (int b = 0; b < g.blocks(); ++b)
      for (int hg = 0; hg < g.exp_groups(); ++hg) n.push_back(block_name("PROB", l, b) + "." + std::to_string(hg));
  for (int l = 0; l < g.layers; ++l)
    for (int h = 0; h < g.heads; ++h) {
      for (int seg = 0; seg < g.wsum_segments(); ++seg) n.push_back(block_name("WSUM", l, h) + "." + std::to_string(seg));
      n.push_back(block_name("WSUMX", l, h));
    }
  for (int l = 0; l < g.layers; ++l)
    for (int h = 0; h < g.heads; ++h)
      for (int seg = 0; seg < g.slow_segments(); ++seg) n.push_back(slow_name(l, h, seg));
  if (g.crosses())
    for (const std::string& c : CrossingRoutine::names(2 * g.head_size)) n.push_back(c);
  for (const char* r : {"RS", "RM", "RE", "RX", "RSUM", "RP", "RPX"})
    for (int h = 0; h < g.heads; ++h) n.push_back(name(r, h));
  for (int h = 0; h < g.heads; ++h)
    for (int i = 0; i <= g.head_size; ++i) n.push_back(block_name("RXB", h, i));
  return n;
}

AttentionStages::AttentionStages(Assembler& as, const AttentionGeometry& g) : as_(as), g_(g) {
  if (g.banks < 8 || g.banks % 8 != 0) fail("attention stages: a block reads 8 banks of a row; {} banks", g.banks);
  if (g.heads % g.kv_heads != 0) fail("attention stages: {} heads over {} kv heads", g.heads, g.kv_heads);
  if (g.wave_heads < 1) fail("attention stages: {} heads per wave", g.wave_heads);
  row_ = as.inputs("attn.row", g.row_bits);
  cache_group_ = as.inputs("score.cache", g.layers * g.groups());
  for (int l = 0; l < g.layers; ++l) cache_row_.push_back(as.inputs("score.cache_row" + std::to_string(l), g.row_bits));
  if (g.exp_heads < 1 || g.heads % g.exp_heads != 0) fail("attention stages: {} heads per EXP cycle", g.exp_heads);
  for (auto [in, prefix] : {std::pair{&score_, "score"}, std::pair{&exp_, "exp"}}) {
    in->on = as.input(std::string(prefix) + ".on");
    in->group = as.inputs(std::string(prefix) + ".group", g.groups());
    in->block = as.inputs(std::string(prefix) + ".block", g.blocks());
  }
  // The score RAM is banked (a group's 8 heads, one row per block of the group: wiped with
  // the group at its row 0); the exp RAM has a head per position, wiped with its block.
  score_.wipe = as.inputs("score.wipe", g.groups());
  exp_.wipe = as.inputs("exp.wipe", g.blocks());
  exp_head_group_ = as.inputs("exp.heads", g.exp_groups());
  exp_.row = as.inputs("exp.row", AttentionGeometry::bits_for(g.exp_groups()));
  exp_query_ = as.inputs("exp.query", AttentionGeometry::bits_for(g.exp_groups()));
  sum_on_ = as.input("sum.on");
  sum_wipe_ = as.inputs("sum.wipe", g.exp_heads);
  sum_back_ = as.input("sum.read");
  prob_.on = as.input("prob.on");
  prob_.block = as.inputs("prob.block", g.blocks());
  prob_.wipe = as.inputs("prob.wipe", g.blocks());
  prob_.row = as.inputs("prob.row", AttentionGeometry::bits_for(g.exp_groups()));
  prob_back_ = as.input("prob.read_back");
  wsum_on_ = as.input("wsum.on");
  xb_back_ = as.input("xb.read");
  wsum_k_ = as.inputs("wsum.k", g.exp_heads);
  wsum_kv_ = as.inputs("wsum.kv", g.kv_heads);
  wsum_head_ = as.inputs("wsum.head", g.heads);
  vram_row_ = as.inputs("vram.row", AttentionGeometry::bits_for(g.layers));
  wsum_vrow_ = as.inputs("wsum.vrow", AttentionGeometry::bits_for(g.layers));
  // Sharing WSUM's v RAM heads, SLOW reads them at WSUM's row bits.
  if (!g.slow_shares_wsum_heads()) slow_vrow_ = as.inputs("slow.vrow", AttentionGeometry::bits_for(g.layers));
  slow_on_ = as.input("slow.on");
  slow_k_ = as.inputs("slow.k", g.exp_heads);
  slow_kv_ = as.inputs("slow.kv", g.kv_heads);
  slow_head_ = as.inputs("slow.head", g.heads);
  if (g.slow_segment_blocks < 1 || g.wsum_segment_blocks < 1 || g.sum_segment_blocks < 1)
    fail("attention stages: SLOW segments of {} blocks, WSUM segments of {}, SUM segments of {}", g.slow_segment_blocks,
         g.wsum_segment_blocks, g.sum_segment_blocks);
  slow_segment_ = as.inputs("slow.segment", g.slow_segments());
  sum_segment_ = as.inputs("sum.segment", g.sum_segments());
  wsum_segment_ = as.inputs("wsum.segment", g.wsum_segments());
  wsumx_head_ = as.inputs("wsumx.head", g.heads);
  // The carries: SLOW's, hi and lo of every lane (npu::TwoTier; big is recovered from hi);
  // WSUM's, one value per lane; SUM's, its acc.
  if (g.crosses()) cross_.emplace(as, 2 * g.head_size, g.carry_register);
  if (g.row_floats < g.head_size) fail("attention stages: a RAM row holds {} floats, a head {}", g.row_floats, g.head_size);
  sum_k_ = as.inputs("sum.k", g.exp_heads);
  max_on_ = as.input("max.on");
  score_back_ = as.input("score.read_back");
  max_back_ = as.input("max.read");
  exp_back_ = as.input("exp.read_back");
}

void AttentionStages::cache_read(int layer, std::vector<ValueId>& row_bits, std::vector<ValueId>& bank_flags) {
  std::vector<ValueId> by_bank;
  for (int bank = 0; bank < g_.banks; ++bank) by_bank.push_back(cache_group_[at(layer * g_.groups() + bank / 8)]);
  // The row bits of layer l's cache alone, which only SCORE(l) sets: the shared row bits
  // (attn.row, which EXP sets too) woke every layer's cache heads (41 GDN sublayers of the
  // 256-position machine) on every SCORE and EXP cycle of a block past row 0.
  row_bits = either(as_, row_bits, cache_row_[at(layer)], "kv.read_bits");
  bank_flags = either(as_, bank_flags, by_bank, "kv.read_flag");
}

void AttentionStages::build(const std::vector<ValueId>& q, const std::vector<std::vector<ValueId>>& slots,
                            const std::vector<ValueId>& v, ValueId qkv_on, ValueId pos, compiler::OpRange before) {
  compiler::Program& p = as_.program();
  const int H = g_.heads, hs = g_.head_size, kv_mul = g_.heads / g_.kv_heads;

  // The write sides of the RAMs read a stage's flag instead of the rail
  // (compiler::GdnMemory::key_enable: 1 or +-0, and +-0 only where the write flag, the wipe
  // flag and the key bits are +-0). The exp RAM's position heads are keyed by exp_.row,
  // which only EXP tokens set, with their block and wipe flags: they read EXP's flag; the
  // prob and slow prob RAMs' by prob_.row, PROB's (each stage its own row bits, so that
  // neither stage wakes the other's ~100 heads, as one shared enable did); the v RAMs by
  // vram_row_, which only QKV sets (with the write flags, through its address unit; WSUM
  // and SLOW read at their own row bits, wsum.vrow and slow.vrow, so that their cycles do
  // not wake the write sides). Before, their constants read the rail, so the ~300 GDN
  // sublayers holding them ran on every cycle of the 256-position machine
  // (docs/npu-machine.md, "Idle units that are really idle").
  v_write_enable_ = qkv_on;
  // POS is read on every attention cycle (SCORE to SLOW: the rows past POS, the loops'
  // branches), and the chains' per-position flags [t > POS] (sum.past, wsum.past,
  // slow.past: one neuron per position, spread over ~150 MLP sublayers of the 256-position
  // machine) read it: with the register's value they ran on every such cycle once POS > 0,
  // 541 instead of 164 MLP sublayers on a late EXP cycle. Each chain reads its own copy of
  // POS, gated by its stage's flag (exact: POS is an integer below 2^20), so it runs on
  // its stage's cycles only.
  const ValueId sum_pos = as_.gated(std::vector<ValueId>{pos}, {sum_on_}, "sum.pos")[0];
  const ValueId wsum_pos = as_.gated(std::vector<ValueId>{pos}, {wsum_on_}, "wsum.pos")[0];  // SLOW's: build_slow

  // SCORE: every head's 8 scaled scores and its block max (rows past POS left out).
  const size_t first = p.ops().size();
  const std::vector<ValueId> past = rows_past(p, row_, score_.group, g_.banks, pos);
  std::vector<std::vector<ValueId>> scores(8);  // [slot][head]
  std::vector<ValueId> block_max;
  std::vector<compiler::OpRange> waves;
  for (int h = 0; h < H; ++h) {
    const size_t head_first = p.ops().size();
    const int j = h / kv_mul;
    const std::vector<ValueId> qh(q.begin() + h * hs, q.begin() + (h + 1) * hs);
    std::vector<std::vector<ValueId>> keys;
    for (const auto& s : slots) keys.emplace_back(s.begin() + j * 2 * hs, s.begin() + j * 2 * hs + hs);
    const npu::ScoreBlock sb = npu::attn_score_block(p, qh, keys, npu::kNoMax, past);
    for (size_t s = 0; s < 8; ++s) scores[s].push_back(sb.scaled[s]);
    block_max.push_back(sb.max);
    // Heads in waves, one below the other: a wave's divisions are the widest part.
    if (h % g_.wave_heads == 0) waves.push_back({head_first, head_first});
    waves.back().end = p.ops().size();
  }
  order_waves(p, waves);
  compiler::enable_constants(p, first, score_.on);
  as_.gate_clears(first, p.ops().size(), score_.on);
  p.order(before, compiler::OpRange{first, p.ops().size()});
  // The block loops run themselves: SCORE, EXP and PROB of block b branch to block b + 1
  // while a position up to POS lies there, else to the next stage.
  as_.branch(more_blocks(p, block_base(row_, score_.group, g_.banks), score_.on, pos));
  as_.branch(more_blocks(p, block_base(row_, exp_.group, g_.banks), exp_.on, pos));
  {
    Lin prob_base;
    for (int b = 1; b < g_.blocks(); ++b) prob_base.terms.push_back({prob_.block[at(b)], static_cast<float>(8 * b)});
    as_.branch(more_blocks(p, prob_base, prob_.on, pos));
  }

  // The score RAM, read by EXP at the token's block and by RS at POS.
  const npu::KvAddress saddr = npu::kv_address(p, pos, score_back_, g_.banks, g_.row_bits);
  as_.gate_clears(saddr.first_op, p.ops().size(), score_back_);  // idle, the address unit's values are +-0
  std::vector<ValueId> exp_read_bank;  // EXP reads the bank group its token names
  for (int bank = 0; bank < g_.banks; ++bank) exp_read_bank.push_back(exp_.group[at(bank / 8)]);
  const auto score_slots =
      banked_ram(p, g_.score_low_binade, scores, row_, score_.group, score_.wipe, either(as_, saddr.row_bits, row_, "score.qbits"),
                 either(as_, saddr.bank, exp_read_bank, "score.qflag"), score_.on, "score RAM");

  // The block-max RAM: one head (one row) per block, wiped and written by its SCORE.
  std::vector<std::vector<ValueId>> bmax;
  {
    std::vector<npu::FloatRamHead> one(1);
    one[0].data = block_max;
    const auto neg = npu::float_ram_negations(p, one, score_.on, "block-max RAM");
    std::vector<npu::FloatRamHead> heads;
    for (int b = 0; b < g_.blocks(); ++b) {
      bmax.push_back(p.values("bmax.out" + std::to_string(b), H));
      npu::FloatRamHead h;
      h.data = block_max;
      h.negated = neg[0];
      h.write_flag = h.wipe_flag = score_.block[at(b)];
      h.read_flag = max_on_;
      h.out = bmax.back();
      heads.push_back(std::move(h));
    }
    npu::float_ram(p, npu::FloatRamWindow{g_.score_low_binade}, heads, score_.on, "block-max RAM");
  }

  // MAX: every head's max over the blocks up to POS's ([8 b > pos]: block b stands in
  // with block 0's max, which is always there).
  const size_t first_max = p.ops().size();
  std::vector<ValueId> block_past(at(g_.blocks()), compiler::kNever);
  for (int b = 1; b < g_.blocks(); ++b)
    block_past[at(b)] = npu::attn_int_positive(p, Lin{{{kOne, static_cast<float>(8 * b)}, {pos, -1.0f}}}, "max.past");
  // Past max_side_by_side_blocks blocks, heads in waves of wave_heads, one below the other
  // (as SCORE's): side by side, the heads' trees of `greater`s over 64 blocks were the
  // widest sublayer of the 512-position machine (hidden 6,656 -> 4,288 in waves); up to 32
  // blocks the waves only add depth.
  const int max_wave = g_.blocks() > g_.max_side_by_side_blocks ? g_.wave_heads : H;
  std::vector<ValueId> head_max;
  std::vector<compiler::OpRange> max_waves;
  for (int h = 0; h < H; ++h) {
    const size_t head_first = p.ops().size();
    std::vector<ValueId> level = {bmax[0][at(h)]};
    for (int b = 1; b < g_.blocks(); ++b)
      level.push_back(npu::select(p, block_past[at(b)], bmax[0][at(h)], bmax[at(b)][at(h)], "max.masked"));
    head_max.push_back(npu::attn_max_tree(p, std::move(level)));
    if (h % max_wave == 0) max_waves.push_back({head_first, head_first});
    max_waves.back().end = p.ops().size();
  }
  order_waves(p, max_waves);
  compiler::enable_constants(p, first_max, max_on_);
  as_.gate_clears(first_max, p.ops().size(), max_on_);
  // The max RAM: one row, wiped and written by MAX, read by EXP and RM.
  const std::vector<ValueId> max_out = p.values("max.out", H);
  {
    std::vector<npu::FloatRamHead> mh(1);
    mh[0].data = head_max;
    mh[0].write_flag = mh[0].wipe_flag = max_on_;
    mh[0].read_flag = max_back_;
    mh[0].out = max_out;
    npu::float_ram(p, npu::FloatRamWindow{g_.score_low_binade}, mh, max_on_, "max RAM");
  }

  // EXP: expf(score - max) at the block's 8 positions for one group of exp_heads heads
  // (the token's), as (mant, exponent) (npu::expf_parts: run.c's expf bit for bit); rows
  // past POS take the max itself (expf(0): a placeholder). The group's scores and maxima
  // are picked by its flag (one live term per lane), so an idle EXP sees zeros although
  // RS and RM read the same RAMs.
  const int E = g_.exp_heads, exp_groups = g_.exp_groups();
  const size_t first_exp = p.ops().size();
  const std::vector<ValueId> exp_past = rows_past(p, row_, exp_.group, g_.banks, pos);
  auto pick = [&](auto value_of, const std::string& label) {  // value_of(head) for the group's k-th head
    std::vector<ValueId> out = p.values(label, E);
    std::vector<Neuron> ns;
    for (int k = 0; k < E; ++k)
      for (int hg = 0; hg < exp_groups; ++hg)
        ns.push_back(Neuron{Lin{{{exp_head_group_[at(hg)], 128.0f}}}, Lin{{{value_of(hg * E + k), 1.0f / 128.0f}}},
                            {{out[at(k)], 1.0f}}});
    p.mlp(label, std::move(ns));
    return out;
  };
  const std::vector<ValueId> m = pick([&](int h) { return max_out[at(h)]; }, "exp.max");
  std::vector<std::vector<ValueId>> exps(8);  // [slot][k mant, k exponent, ...]
  for (size_t s = 0; s < 8; ++s) {
    const std::vector<ValueId> sc = pick([&](int h) { return score_slots[s][at(h)]; }, "exp.score");
    for (int k = 0; k < E; ++k) {
      const ValueId x = s == 0 ? sc[at(k)] : npu::select(p, exp_past[s], m[at(k)], sc[at(k)], "exp.masked");
      const npu::ExpfResult e = npu::expf_parts(p, npu::sub(p, x, m[at(k)], "attn.shift"));  // run.c: expf(x - max)
      exps[s].push_back(e.mant);
      exps[s].push_back(e.exponent);
    }
  }
  compiler::enable_constants(p, first_exp, exp_.on);
  as_.gate_clears(first_exp, p.ops().size(), exp_.on);
  // The exp RAM: one head per position t (written by EXP of t's block), one row per head
  // group; read by SUM (its segment's positions), by PROB (its block's) and by RE / RX
  // (the position POS holds). Each head is emitted where SUM's chain needs its place in a
  // segment, and its out values go into SUM's pick and into PROB's slot t mod 8 in the same
  // op, so that none stays live past it.
  const int P = g_.positions;
  // RE / RX's read flag of head t, [POS == t] on their cycles, is made beside the head from
  // their copy of POS (position_flag): a one-hot over the positions made at the top would
  // live down to the last head.
  const ValueId exp_pos = as_.gated(std::vector<ValueId>{pos}, {exp_back_}, "exp.pos")[0];
  // The heads' query bits (a head group), per block: exp.query gated by the block's PROB
  // flag, SUM's or RE / RX's (the stages that read the heads). PROB sets exp.query, so
  // with the bits themselves every PROB cycle woke every position's head (82 GDN
  // sublayers of the 256-position machine) to read one block's.
  // One op for every block (one sublayer reads exp.query): the copies' own ops, placed
  // near their heads, woke ~30 sublayers on every PROB cycle.
  // Each block's copies are Assembler::gated's (their clears gated by the flags' sum, 0 or
  // 1: one stage at a time), all in one op.
  std::vector<std::vector<ValueId>> exp_query;
  {
    std::vector<Neuron> ns;
    for (int b = 0; b < g_.blocks(); ++b) {
      exp_query.push_back(as_.gated_neurons({exp_query_}, {prob_.block[at(b)], sum_on_, exp_back_}, "exp.query_bits",
                                            "exp.query_on", ns));
    }
    p.mlp("exp.query_bits", std::move(ns));
  }
  std::vector<npu::FloatRamHead> by_slot(8);
  for (size_t s = 0; s < 8; ++s) by_slot[s].data = exps[s];
  const auto negated = npu::float_ram_negations(p, by_slot, exp_.on, "exp RAM");
  // PROB's operands and RE / RX's: slot t mod 8 of the block read ([k mant, k exponent, ...]).
  std::vector<std::vector<ValueId>> exp_slots;
  for (int s8 = 0; s8 < 8; ++s8) exp_slots.push_back(p.values("exp.slot" + std::to_string(s8), 2 * E));

  // SUM: head h's exps at every position t <= POS (k = h's place in its group picks its two
  // values; positions past POS give (0, 0), a +0 term) added in run.c's order, in segments
  // of sum_segment_blocks blocks, one per cycle (SUM(l).h.s), from the carry (segment 0
  // from +0). Place o of the segment (t = s W + o) reads the heads of the positions
  // s' W + o, each on its segment's flag. While POS lies past the segment the acc crosses
  // to segment s + 1 (one value: +0 or tier-encoded in [2^-78, 2^36); attn_sum_row gets
  // the tier bit back from its sign); POS's segment writes the sum RAM.
  const int Ws = g_.sum_positions(), Ss = g_.sum_segments();
  const Lin sbase = segment_base(sum_segment_, Ws);
  const ValueId s_more = more_blocks(p, sbase, sum_on_, sum_pos, Ws);
  const size_t first_sum = p.ops().size();
  const ValueId acc_in = Ss > 1 ? cross_->join(1, sum_on_, "sum.carry")[0] : p.value("sum.acc0");
  std::vector<HeadOps> exp_heads;
  auto exp_at = [&](size_t o) {
    const ValueId row_past = position_past(p, sbase, static_cast<int>(o), sum_pos, "sum.past");
    const ValueId mant = p.value("sum.mant"), exponent = p.value("sum.exponent");
    for (int seg = 0; seg < Ss && seg * Ws + static_cast<int>(o) < P; ++seg) {
      const size_t t = at(seg * Ws) + o;
      const ValueId read = sum_segment_[at(seg)];
      const ValueId re = position_flag(t, exp_pos, exp_back_, "exp.read_at_pos");
      const ValueId flag = any_of(as_, {{read}, {prob_.block[t / 8]}, {re}}, "exp.read_flag")[0];
      const size_t head_begin = p.ops().size();
      const std::vector<ValueId> out =
          position_head(p, "exp", t, exps, negated, exp_, exp_query[t / 8], flag, g_.exp_low_binade);
      exp_heads.push_back({head_begin, p.ops().size(), flag});
      std::vector<Neuron> ns;
      for (int k = 0; k < E; ++k) {
        const Lin gate{{{read, 128.0f}, {sum_k_[at(k)], 128.0f}, {row_past, -128.0f}, {kOne, -128.0f}}};
        ns.push_back(Neuron{gate, Lin{{{out[at(2 * k)], 1.0f / 128.0f}}}, {{mant, 1.0f}}});
        ns.push_back(Neuron{gate, Lin{{{out[at(2 * k + 1)], 1.0f / 128.0f}}}, {{exponent, 1.0f}}});
      }
      // PROB's block or RE / RX's position: the head's floats into its slot.
      const Lin to_slot{{{prob_.block[t / 8], 128.0f}, {re, 128.0f}}};
      for (size_t f = 0; f < out.size(); ++f)
        ns.push_back(Neuron{to_slot, Lin{{{out[f], 1.0f / 128.0f}}}, {{exp_slots[t % 8][f], 1.0f}}});
      p.mlp("sum.pick", std::move(ns));
      // Exclusive: mant and exponent on its own segment's cycle, the slot on its block's
      // (PROB) or its position's (RE / RX) cycle.
      p.mark_exclusive_writes({p.ops().size() - 1, p.ops().size()});
    }
    return std::pair{mant, exponent};
  };
  const ValueId acc = npu::attn_sum_row(p, at(Ws), exp_at, acc_in);
  // The sum from POS's segment's acc (a segment that goes on may end in the low tier: its
  // acc is left out), acc / 2^27 (npu::attn_sum_from_acc).
  const ValueId sum_fin = p.value("sum.fin");
  p.mlp("sum.fin", {Neuron{Lin{{{sum_on_, 128.0f}, {s_more, -128.0f}}}, Lin{{{acc, 1.0f / 128.0f}}}, {{sum_fin, 1.0f}}}});
  const ValueId sum = npu::attn_sum_from_acc(p, sum_fin);
  compiler::enable_constants(p, first_sum, sum_on_);
  as_.gate_clears(first_sum, p.ops().size(), sum_on_);
  // Registered after the stage's: a head's out values are +0 whenever its read flag is, and
  // the slots are read (and nonzero) on PROB's and RE / RX's cycles.
  for (const HeadOps& h : exp_heads) as_.gate_clears(h.begin, h.end, h.read);
  {
    const ValueId slot_on = either(as_, {prob_.on}, {exp_back_}, "exp.slot_on")[0];
    for (const auto& slot : exp_slots) as_.gate_clears_of(slot, slot_on);
  }
  if (Ss > 1) {
    cross_->carry({acc}, sum_on_, s_more, "sum.carry_out");
    as_.branch(s_more);
  }
  // The sum RAMs: one per place k in a head group, row = the group; POS's SUM segment of
  // head h writes RAM h mod E (wiped by the group's first SUM), PROB and RSUM read a group's
  // row.
  const std::vector<ValueId> sum_out = p.values("sum.out", E);
  {
    std::vector<npu::FloatRamHead> sh(at(E));
    const std::vector<ValueId> write = stop_flags(as_, sum_k_, s_more, "sum.write"),
                                wipe = stop_flags(as_, sum_wipe_, s_more, "sum.wipe");
    for (int k = 0; k < E; ++k) {
      sh[at(k)].data = {sum};
      sh[at(k)].key_bits = sh[at(k)].query_bits = exp_query_;
      sh[at(k)].write_flag = write[at(k)];
      sh[at(k)].wipe_flag = wipe[at(k)];
      sh[at(k)].read_flag = sum_back_;
      sh[at(k)].out = {sum_out[at(k)]};
    }
    npu::float_ram(p, npu::FloatRamWindow{g_.score_low_binade}, sh, sum_on_, "sum RAM");
  }

  // PROB: run.c's att[t] /= sum for the block's 8 positions and the token's head group
  // (npu::attn_probability: (pm, exponent) with pm 2^exponent == C's quotient, the
  // reciprocal once per head). Operands gated: RE / RX / RSUM read the same values.
  const size_t first_prob = p.ops().size();
  const std::vector<ValueId> sums = as_.gated(sum_out, {prob_.on}, "prob.sum");
  std::vector<ValueId> recip;
  for (ValueId sv : sums) recip.push_back(npu::attn_sum_reciprocal(p, sv));
  // pm is 0 or in [2^-54, 4): wider than a RAM window, so it is stored in two columns,
  // pm itself when pm >= 2^-22 and pm 2^30 below (one of them +-0; pm = big + small 2^-30).
  const ValueId split = p.value("prob.split");
  npu::const_acc(p, split, kProbSplit, "prob.split");
  const ValueId zero = p.value("prob.zero");  // never written: +0
  std::vector<std::vector<ValueId>> probs(8);  // [slot][k big, k small, k exponent, ...]
  for (size_t s8 = 0; s8 < 8; ++s8) {
    const std::vector<ValueId> e = as_.gated(exp_slots[s8], {prob_.on}, "prob.exp");
    for (int k = 0; k < E; ++k) {
      const ValueId pm = npu::attn_probability(p, e[at(2 * k)], e[at(2 * k + 1)], sums[at(k)], recip[at(k)]);
      const ValueId small = npu::greater(p, split, pm);
      const ValueId pm_scaled = p.value("prob.scaled");
      npu::scale_acc(p, pm_scaled, pm, kProbSmallScale, "prob.scaled");
      probs[s8].push_back(npu::select(p, small, zero, pm, "prob.big"));
      probs[s8].push_back(npu::select(p, small, pm_scaled, zero, "prob.small"));
      probs[s8].push_back(e[at(2 * k + 1)]);
    }
  }
  compiler::enable_constants(p, first_prob, prob_.on);
  as_.gate_clears(first_prob, p.ops().size(), prob_.on);
  // The prob RAM: the exp RAM's layout (one head per position, a row per head group),
  // each head emitted where WSUM's chain needs its position; read by WSUM and by RP / RPX
  // at POS.
  // RP / RPX's read flag of head t, [POS == t] on their cycles, is made beside the head
  // from their copy of POS (position_flag), as RE / RX's are: a one-hot over the positions
  // made at the top lived down to the last head (512 dims of the 512-position machine).
  const ValueId prob_pos = as_.gated(std::vector<ValueId>{pos}, {prob_back_}, "prob.pos")[0];
  std::vector<npu::FloatRamHead> by_slot_p(8);
  for (size_t s8 = 0; s8 < 8; ++s8) by_slot_p[s8].data = probs[s8];
  const auto prob_neg = npu::float_ram_negations(p, by_slot_p, prob_.on, "prob RAM");
  std::vector<std::vector<ValueId>> prob_out(at(P));
  std::vector<size_t> prob_op(at(P));
  std::vector<ValueId> prob_read_flag(at(P));

  // The v RAM: the cache's v again, one head per (position, chunk of kv heads), a row per
  // layer, written by QKV at POS and read by WSUM at every position (each head where the
  // chain needs it).
  const int per = g_.row_floats / hs, chunks = (g_.kv_heads + per - 1) / per;
  // The v RAMs' write flags: [POS == t] on QKV's cycles, made beside each head from QKV's
  // copy of POS (v_write_flag): a one-hot over the positions made at the top would live
  // down to the last head (1,454 dims of the 512-position machine).
  v_pos_ = as_.gated(std::vector<ValueId>{pos}, {qkv_on}, "vram.pos")[0];
  std::vector<std::vector<ValueId>> v_data(at(chunks));
  for (int c = 0; c < chunks; ++c)
    for (int j = c * per; j < std::min(g_.kv_heads, (c + 1) * per); ++j)
      v_data[at(c)].insert(v_data[at(c)].end(), v.begin() + j * hs, v.begin() + (j + 1) * hs);
  std::vector<npu::FloatRamHead> by_chunk(at(chunks));
  for (int c = 0; c < chunks; ++c) by_chunk[at(c)].data = v_data[at(c)];
  const auto v_neg = npu::float_ram_negations(p, by_chunk, qkv_on, "v RAM");

  // WSUM: head h's weighted sum of v over the positions up to POS in run.c's order, the
  // fast path with its unsafe bit (npu::attn_wsum_row); rows past POS get pm = 0.
  //
  // In segments of wsum_segment_blocks blocks, one per cycle (WSUM(l).h.s), so that the
  // chain's depth does not grow with the positions. Place o of the segment (position
  // t = s W + o) reads the heads of the positions s' W + o, each on its segment's flag,
  // straight into the picks (gate 128 (segment + place k - past - 1) for head h's
  // probability, past = [t > POS]; 128 (segment + kv head - 1) for its v): one live term
  // per value. While POS lies past the segment and no lane is unsafe, the lanes' state
  // crosses to segment s + 1 (the crossing routine): one float per lane, the lane's carry
  // value c (npu::attn_wsum_carry) as carry_split's high float c 2^-17, an uplink float
  // whenever c is 0 or |c| >= 2^-30. A lane below that (0 < |xb| < 2^-56) counts as
  // unsafe: the fast path stops there and the exact slow path runs, so every crossing is
  // one float (unsafe is sticky, so an unsafe lane ends the head's fast path at once).
  // Otherwise the segment writes the xb RAM (xb and the head's bit: a lane unsafe, pending
  // or below) and goes on to WSUMX(l).h, which branches on that bit to the slow path.
  const int Ww = g_.wsum_positions(), Sw = g_.wsum_segments(), B = g_.wsum_blocks();
  const Lin wbase = segment_base(wsum_segment_, Ww);
  const ValueId w_more = more_blocks(p, wbase, wsum_on_, wsum_pos, Ww);
  // The prob RAM's query bits (a head group), for WSUM and RP / RPX only: exp.query, which
  // PROB, SUM and SLOW set too, would wake every position's head on their cycles.
  // Sharing its heads, SLOW reads them on its own cycles too.
  const bool shared = g_.slow_shares_wsum_heads();
  const std::vector<ValueId> wsum_query =
      shared ? as_.gated(exp_query_, {wsum_on_, prob_back_, slow_on_}, "wsum.query")
             : as_.gated(exp_query_, {wsum_on_, prob_back_}, "wsum.query");
  const SlowPlaces places = shared ? slow_places(pos) : SlowPlaces{};
  const size_t first_wsum = p.ops().size();
  npu::WsumChecked start;
  if (Sw > 1) {
    // The lanes' state back from the carry (c = the float 2^17, npu::attn_wsum_uncarry).
    const std::vector<ValueId> f = cross_->arrived_floats(at(hs));
    const ValueId no_low = p.value("wsum.no_low");  // never written: +0
    for (int i = 0; i < hs; ++i) {
      const ValueId c = carry_join(p, f[at(i)], no_low, wsum_on_, "wsum.carry");
      const npu::WsumCarried lane = npu::attn_wsum_uncarry(p, c, wsum_on_);
      start.xb.push_back(lane.xb);
      start.pending.push_back(lane.pending);
    }
  }
  std::vector<size_t> prob_op_end(at(P));
  const std::vector<ValueId> prob_read = p.values("prob.read", 3 * E);  // RP / RPX: the floats of POS's head
  std::vector<HeadOps> v_head_ops;
  auto block_at = [&](size_t b) {
    npu::WsumRowBlock in;
    for (int o = static_cast<int>(8 * b); o < std::min(Ww, static_cast<int>(8 * b + 8)); ++o) {
      const ValueId row_past = position_past(p, wbase, o, wsum_pos, "wsum.past");
      in.pm.push_back(p.value("wsum.pm"));
      in.exponent.push_back(p.value("wsum.exponent"));
      in.v.push_back(p.values("wsum.v", hs));
      for (int seg = 0; seg < Sw && seg * Ww + o < P; ++seg) {
        const size_t t = at(seg * Ww + o);
        const ValueId read = wsum_segment_[at(seg)];
        // The prob RAM's heads serve RP / RPX too (at POS's head).
        const ValueId rp = position_flag(t, prob_pos, prob_back_, "prob.read_at_pos");
        // The heads of position t are read by WSUM's segment, by SLOW's (sharing) and by RP.
        const ValueId head_read =
            shared ? either(as_, {read}, {slow_segment_[at(seg)]}, "wsum.head_read")[0] : read;
        prob_read_flag[t] = either(as_, {rp}, {head_read}, "prob.read_flag")[0];
        prob_op[t] = p.ops().size();
        prob_out[t] = position_head(p, "prob", t, probs, prob_neg, prob_, wsum_query, prob_read_flag[t], g_.prob_low_binade);
        prob_op_end[t] = p.ops().size();
        // RP / RPX read the head of POS's position: its floats into prob_read in the same op,
        // so that no head's out values stay live past it.
        std::vector<Neuron> ns;
        for (size_t f = 0; f < prob_read.size(); ++f)
          ns.push_back(Neuron{Lin{{{prob_back_, 128.0f}}}, Lin{{{prob_out[t][f], 1.0f / 128.0f}}}, {{prob_read[f], 1.0f}}});
        for (int k = 0; k < E; ++k) {
          const Lin gate{{{read, 128.0f}, {wsum_k_[at(k)], 128.0f}, {row_past, -128.0f}, {kOne, -128.0f}}};
          ns.push_back(Neuron{gate, Lin{{{prob_out[t][at(3 * k)], 1.0f / 128.0f}}}, {{in.pm.back(), 1.0f}}});
          ns.push_back(Neuron{gate, Lin{{{prob_out[t][at(3 * k + 1)], 1.0f / (128.0f * kProbSmallScale)}}}, {{in.pm.back(), 1.0f}}});
          ns.push_back(Neuron{gate, Lin{{{prob_out[t][at(3 * k + 2)], 1.0f / 128.0f}}}, {{in.exponent.back(), 1.0f}}});
          if (shared) {  // SLOW's pick: its flags, and its enable for the constant (this op is WSUM's range)
            const auto u = at(o);
            const Lin sg{{{slow_segment_[at(seg)], 128.0f}, {slow_k_[at(k)], 128.0f}, {places.past[u], -128.0f}, {slow_on_, -128.0f}}};
            ns.push_back(Neuron{sg, Lin{{{prob_out[t][at(3 * k)], 1.0f / 128.0f}}}, {{places.pm[u], 1.0f}}});
            ns.push_back(Neuron{sg, Lin{{{prob_out[t][at(3 * k + 1)], 1.0f / (128.0f * kProbSmallScale)}}}, {{places.pm[u], 1.0f}}});
            ns.push_back(Neuron{sg, Lin{{{prob_out[t][at(3 * k + 2)], 1.0f / 128.0f}}}, {{places.exponent[u], 1.0f}}});
          }
        }
        p.mlp("wsum.pick", std::move(ns));
        // Exclusive: a pick adds only on its own segment's cycle (WSUM's or SLOW's flag), and
        // RP's reads add the one head at POS; so the picks of all positions need no order.
        p.mark_exclusive_writes({p.ops().size() - 1, p.ops().size()});
        std::vector<std::vector<ValueId>> vout;
        std::vector<npu::FloatRamHead> vh;
        for (int ch = 0; ch < chunks; ++ch) {
          vout.push_back(p.values("v.out" + std::to_string(t), static_cast<int>(v_data[at(ch)].size())));
          npu::FloatRamHead h;
          h.data = v_data[at(ch)];
          h.negated = v_neg[at(ch)];
          h.key_bits = vram_row_;
          h.query_bits = wsum_vrow_;
          h.write_flag = position_flag(t, v_pos_, qkv_on, "vram.write");
          h.write_enable = v_write_enable_;
          h.read_flag = head_read;
          h.out = vout.back();
          vh.push_back(std::move(h));
        }
        const size_t first_v = p.ops().size();
        npu::float_ram(p, npu::FloatRamWindow{g_.v_low_binade}, vh, qkv_on, "v RAM " + std::to_string(t));
        v_head_ops.push_back({first_v, p.ops().size(), head_read});
        std::vector<Neuron> vn;
        for (int j = 0; j < g_.kv_heads; ++j)
          for (int i = 0; i < hs; ++i) {
            const Lin up{{{vout[at(j / per)][at((j % per) * hs + i)], 1.0f / 128.0f}}};
            vn.push_back(Neuron{Lin{{{read, 128.0f}, {wsum_kv_[at(j)], 128.0f}, {kOne, -128.0f}}}, up, {{in.v.back()[at(i)], 1.0f}}});
            if (shared)
              vn.push_back(Neuron{Lin{{{slow_segment_[at(seg)], 128.0f}, {slow_kv_[at(j)], 128.0f}, {slow_on_, -128.0f}}}, up,
                                  {{places.v[at(o)][at(i)], 1.0f}}});
          }
        p.mlp("wsum.v", std::move(vn));
        p.mark_exclusive_writes({p.ops().size() - 1, p.ops().size()});  // on its segment's cycle only
      }
    }
    return in;
  };
  const npu::WsumChecked w = npu::attn_wsum_row(p, at(B), at(hs), block_at, start);
  // xb = the chain's value / 2^26 (exact); the head's unsafe bit: any lane unsafe or
  // pending (then the fast xb may differ from C's); and whether the state crosses on:
  // cross = more AND no lane unsafe.
  std::vector<ValueId> xb_data;
  for (int i = 0; i < hs; ++i) {
    xb_data.push_back(p.value("wsum.xb"));
    npu::scale_acc(p, xb_data.back(), w.xb[at(i)], 1.0f / npu::kWsumScale, "wsum.xb");
  }
  Lin any, cross{{{w_more, 1.0f}}};  // the head's bit; and cross: more - the lanes that stop it > 0
  for (int i = 0; i < hs; ++i) {
    any.terms.push_back({w.unsafe[at(i)], 1.0f});
    any.terms.push_back({w.pending[at(i)], 1.0f});
    cross.terms.push_back({w.unsafe[at(i)], -1.0f});
  }
  std::vector<ValueId> carry;
  if (Sw > 1) {
    for (int i = 0; i < hs; ++i) {
      const OneFloatCarry c =
          carry_split_one(p, npu::attn_wsum_carry(p, w.xb[at(i)], w.pending[at(i)], wsum_on_), wsum_on_, "wsum.carry_out");
      carry.push_back(c.high);
      any.terms.push_back({c.below, 1.0f});
      cross.terms.push_back({c.below, -1.0f});
    }
  }
  xb_data.push_back(npu::attn_int_positive(p, any, "wsum.unsafe"));
  // 0 with one segment: POS never lies past it.
  wsum_cross_ = Sw > 1 ? npu::attn_int_positive(p, cross, "wsum.cross") : w_more;
  compiler::enable_constants(p, first_wsum, wsum_on_);
  const size_t end_wsum = p.ops().size();
  as_.gate_clears(first_wsum, end_wsum, wsum_on_);
  // Registered after the stage's: a head's out values are +0 whenever its read flag is.
  for (int t = 0; t < P; ++t) as_.gate_clears(prob_op[at(t)], prob_op_end[at(t)], prob_read_flag[at(t)]);
  for (const HeadOps& h : v_head_ops) as_.gate_clears(h.begin, h.end, h.read);
  as_.gate_clears_of(prob_read, prob_back_);
  if (shared)  // written in WSUM's range, on SLOW's cycles
    for (int o = 0; o < Ww; ++o) {
      as_.gate_clears_of({places.pm[at(o)], places.exponent[at(o)]}, slow_on_);
      as_.gate_clears_of(places.v[at(o)], slow_on_);
    }
  if (Sw > 1) {
    cross_->carry_floats(carry, wsum_cross_, "wsum.carry_out");
    as_.branch(wsum_cross_);
  }

  SlowInputs slow_in{probs, prob_neg, v_data, v_neg, qkv_on, pos, shared ? &places : nullptr};
  // SLOW below WSUM (its first products after WSUM's chain), or beside it.
  const bool beside = shared && g_.slow_beside_wsum;
  const SlowResult slow =
      build_slow(slow_in, beside ? std::nullopt : std::optional<compiler::OpRange>{{first_wsum, end_wsum}});

  // The xb RAM: one one-row head per nested head (xb and the unsafe bit), wiped and
  // written by the WSUM segment that ends that head's fast path (not `cross`) or by the
  // SLOW segment that holds POS (the slow path's xb, the bit 1: not `more`), read all at
  // once by ATTO, RXB and WSUMX.
  std::vector<std::vector<ValueId>> xb_out;
  {
    const ValueId xb_on = either(as_, {wsum_on_}, {slow_on_}, "xb.on")[0];
    const std::vector<ValueId> xb_write = either(as_, stop_flags(as_, wsum_head_, wsum_cross_, "xb.wsum_write"),
                                                 stop_flags(as_, slow_head_, slow.more, "xb.slow_write"), "xb.write");
    const std::vector<ValueId> data = p.values("xb.data", hs + 1);
    std::vector<Neuron> ns;
    for (int i = 0; i <= hs; ++i) {
      ns.push_back(Neuron{Lin{{{wsum_on_, 128.0f}, {wsum_cross_, -128.0f}}}, Lin{{{xb_data[at(i)], 1.0f / 128.0f}}},
                          {{data[at(i)], 1.0f}}});
      // SLOW's xb, and the bit 1 (the slow path ran), on POS's segment.
      ns.push_back(Neuron{Lin{{{slow_on_, 128.0f}, {slow.more, -128.0f}}},
                          Lin{{{i < hs ? slow.xb[at(i)] : kOne, 1.0f / 128.0f}}}, {{data[at(i)], 1.0f}}});
    }
    p.mlp("xb.data", std::move(ns));
    std::vector<npu::FloatRamHead> one(1);
    one[0].data = data;
    const auto neg = npu::float_ram_negations(p, one, xb_on, "xb RAM");
    std::vector<npu::FloatRamHead> xh;
    for (int h = 0; h < H; ++h) {
      xb_out.push_back(p.values("xb.out" + std::to_string(h), hs + 1));
      npu::FloatRamHead x;
      x.data = data;
      x.negated = neg[0];
      x.write_flag = x.wipe_flag = xb_write[at(h)];
      x.read_flag = xb_back_;
      x.out = xb_out.back();
      xh.push_back(std::move(x));
      xb_.insert(xb_.end(), xb_out.back().begin(), xb_out.back().begin() + hs);
    }
    npu::float_ram(p, npu::FloatRamWindow{g_.score_low_binade}, xh, xb_on, "xb RAM");
  }
  // WSUMX(l).h: head h's unsafe bit, read back from the xb RAM, is the branch to the slow
  // path (one live term: the token names one head).
  {
    const ValueId unsafe = p.value("wsumx.unsafe");
    std::vector<Neuron> ns;
    for (int h = 0; h < H; ++h)
      ns.push_back(Neuron{Lin{{{wsumx_head_[at(h)], 128.0f}}}, Lin{{{xb_out[at(h)][at(hs)], 1.0f / 128.0f}}}, {{unsafe, 1.0f}}});
    p.mlp("wsumx.unsafe", std::move(ns));
    as_.gate_own_clears({unsafe});  // exactly 0 or 1
    as_.branch(unsafe);
  }

  // Read-back lanes: RS, RM, RE / RX (mant / exponent of head k of the group read), RSUM
  // (sum of head k), RP / RPX (pm / exponent of head k).
  lanes_ = slot_sum(p, score_slots, score_back_, "score.read");
  lanes_.insert(lanes_.end(), max_out.begin(), max_out.end());
  const std::vector<ValueId> e = slot_sum(p, exp_slots, exp_back_, "exp.read");
  lanes_.insert(lanes_.end(), e.begin(), e.end());
  lanes_.insert(lanes_.end(), sum_out.begin(), sum_out.end());
  const std::vector<ValueId>& pr = prob_read;
  for (int k = 0; k < E; ++k) {  // pm = big + small 2^-30 (one of them +-0), then the exponent
    const ValueId pm = p.value("prob.read_pm");
    p.mlp("prob.read_pm", {Neuron{Lin{{{prob_back_, 128.0f}}}, Lin{{{pr[at(3 * k)], 1.0f / 128.0f}}}, {{pm, 1.0f}}},
                           Neuron{Lin{{{prob_back_, 128.0f}}}, Lin{{{pr[at(3 * k + 1)], 1.0f / (128.0f * kProbSmallScale)}}},
                                  {{pm, 1.0f}}}});
    lanes_.push_back(pm);
    lanes_.push_back(pr[at(3 * k + 2)]);
  }
  for (const auto& x : xb_out) lanes_.insert(lanes_.end(), x.begin(), x.end());
  if (cross_) {  // the crossing routine's lanes (its parked floats) last
    cross_lane_ = static_cast<int>(lanes_.size());
    const std::vector<ValueId> c = cross_->build();
    lanes_.insert(lanes_.end(), c.begin(), c.end());
  }
}

AttentionStages::SlowPlaces AttentionStages::slow_places(ValueId pos) {
  compiler::Program& p = as_.program();
  const int W = g_.slow_positions();
  SlowPlaces r;
  const size_t first = p.ops().size();
  r.pos = as_.gated(std::vector<ValueId>{pos}, {slow_on_}, "slow.pos")[0];
  const Lin base = segment_base(slow_segment_, W);  // the segment's first position s W
  for (int o = 0; o < W; ++o) {
    r.past.push_back(position_past(p, base, o, r.pos, "slow.past"));
    r.pm.push_back(p.value("slow.pm"));
    r.exponent.push_back(p.value("slow.exponent"));
    r.v.push_back(p.values("slow.v", g_.head_size));
  }
  // Made before WSUM's range: their constants read SLOW's enable, not WSUM's.
  compiler::enable_constants(p, first, slow_on_);
  as_.gate_clears(first, p.ops().size(), slow_on_);
  return r;
}

AttentionStages::SlowResult AttentionStages::build_slow(const SlowInputs& in, std::optional<compiler::OpRange> below) {
  compiler::Program& p = as_.program();
  const int hs = g_.head_size, E = g_.exp_heads, P = g_.positions;
  const int W = g_.slow_positions(), S = g_.slow_segments();
  const ValueId on = slow_on_;
  const bool shared = in.places != nullptr;
  const ValueId pos = shared ? in.places->pos : as_.gated(std::vector<ValueId>{in.pos}, {on}, "slow.pos")[0];  // as sum.pos in build()
  // The slow prob RAM's query bits: exp.query, which WSUM, SUM and PROB set too, woke its
  // heads on their cycles.
  const std::vector<ValueId> slow_query = shared ? std::vector<ValueId>{} : as_.gated(exp_query_, {on}, "slow.query");
  const int per = g_.row_floats / hs;
  const size_t chunks = in.v_data.size();
  const Lin base = segment_base(slow_segment_, W);  // the segment's first position s W
  // The branch: [POS >= s W + W] (POS lies past the segment: its carry crosses to the next
  // one) AND SLOW runs. Outside the enable range (its constants stay 1).
  SlowResult r;
  r.more = more_blocks(p, base, on, pos, W);
  as_.branch(r.more);

  const size_t first = p.ops().size();
  // The chain's state: the carry from the previous segment (hi and lo of every lane, big
  // recovered from hi; +0 for segment 0, which reads no register: C's xb = 0).
  std::vector<npu::TwoTier> xb;
  if (S > 1) {
    const std::vector<ValueId> carry = cross_->join(2 * static_cast<size_t>(hs), on, "slow.carry");
    for (int i = 0; i < hs; ++i) xb.push_back(npu::attn_two_tier_rejoin(p, carry[at(2 * i)], carry[at(2 * i + 1)]));
  } else {
    const ValueId zero = p.value("slow.zero");  // never written: +0
    xb.assign(at(hs), npu::TwoTier{zero, zero, zero});
  }
  // Rows past POS get p = 0, so the chain adds C's products fl(0 v) = +-0 there, which
  // leave C's xb as it is: C's xb starts at +0 and is never -0 (+0 + -0 = +0, and an exact
  // cancellation x + (-x) rounds to +0), x + (+-0) = x for x != 0 and +0 + (+-0) = +0;
  // attn_two_tier_add is C's addition for every pair of its window, these included.
  //
  // Place o of the segment (position t = s W + o) reads the heads of the positions
  // s' W + o, each with its segment's flag (one head is read on a cycle), straight into
  // the picks: gate 128 (segment + place k - past - 1) for the probability of head h (k:
  // h's place in its head group; past = [t > POS]), 128 (segment + kv head - 1) for its
  // kv head's v: one live term per value.
  //
  // Depth: block b's products read nothing of the chain, so they run beside block b - 1's
  // chain (products 34 sublayers, a chain 8 x 7): ordered after block b - 1's products and
  // after the first kProductsLead rows of block b - 1's chain (not earlier: the product
  // values would stay live until their chain starts).
  compiler::OpRange products_before, chain_lead;
  std::vector<HeadOps> head_ops;  // the RAM heads' ops and their read flag
  for (int b = 0; b < g_.slow_blocks(); ++b) {
    const size_t first_products = p.ops().size();
    std::vector<ValueId> pm, ex;
    std::vector<std::vector<ValueId>> v;
    for (int o = 8 * b; o < std::min(W, 8 * b + 8); ++o) {
      if (shared) {  // picked by WSUM's ops
        pm.push_back(in.places->pm[at(o)]);
        ex.push_back(in.places->exponent[at(o)]);
        v.push_back(in.places->v[at(o)]);
        continue;
      }
      const ValueId past = position_past(p, base, o, pos, "slow.past");
      pm.push_back(p.value("slow.pm"));
      ex.push_back(p.value("slow.exponent"));
      v.push_back(p.values("slow.v", hs));
      for (int seg = 0; seg < S && seg * W + o < P; ++seg) {
        const size_t t = at(seg * W + o);
        const ValueId read = slow_segment_[at(seg)];
        const size_t first_head = p.ops().size();
        const std::vector<ValueId> pr =
            position_head(p, "slow prob", t, in.probs, in.prob_neg, prob_, slow_query, read, g_.prob_low_binade);
        head_ops.push_back({first_head, p.ops().size(), read});
        std::vector<Neuron> ns;
        for (int k = 0; k < E; ++k) {
          const Lin gate{{{read, kGateOn}, {slow_k_[at(k)], kGateOn}, {past, -kGateOn}, {kOne, -kGateOn}}};
          ns.push_back(Neuron{gate, Lin{{{pr[at(3 * k)], 1.0f / kGateOn}}}, {{pm.back(), 1.0f}}});
          ns.push_back(Neuron{gate, Lin{{{pr[at(3 * k + 1)], 1.0f / (kGateOn * kProbSmallScale)}}}, {{pm.back(), 1.0f}}});
          ns.push_back(Neuron{gate, Lin{{{pr[at(3 * k + 2)], 1.0f / kGateOn}}}, {{ex.back(), 1.0f}}});
        }
        p.mlp("slow.pick", std::move(ns));
        std::vector<ValueId> vt_all;
        std::vector<npu::FloatRamHead> vh;
        for (size_t ch = 0; ch < chunks; ++ch) {
          npu::FloatRamHead h;
          h.data = in.v_data[ch];
          h.negated = in.v_neg[ch];
          h.key_bits = vram_row_;
          h.query_bits = slow_vrow_;
          h.write_flag = position_flag(t, v_pos_, in.qkv_on, "vram.write");
          h.write_enable = v_write_enable_;
          h.read_flag = read;
          h.out = p.values("slow.v_out" + std::to_string(t), static_cast<int>(h.data.size()));
          vt_all.insert(vt_all.end(), h.out.begin(), h.out.end());
          vh.push_back(std::move(h));
        }
        const size_t first_v = p.ops().size();
        npu::float_ram(p, npu::FloatRamWindow{g_.v_low_binade}, vh, in.qkv_on, "slow v RAM " + std::to_string(t));
        head_ops.push_back({first_v, p.ops().size(), read});
        std::vector<Neuron> vn;
        for (int j = 0; j < g_.kv_heads; ++j)
          for (int i = 0; i < hs; ++i)
            vn.push_back(Neuron{Lin{{{read, kGateOn}, {slow_kv_[at(j)], kGateOn}, {kOne, -kGateOn}}},
                                Lin{{{vt_all[at((j / per) * per * hs + (j % per) * hs + i)], 1.0f / kGateOn}}},
                                {{v.back()[at(i)], 1.0f}}});
        p.mlp("slow.v", std::move(vn));
      }
    }
    const auto products = npu::attn_wsum_slow_products(p, pm, ex, v);
    const compiler::OpRange products_range{first_products, p.ops().size()};
    if (b == 0 && below) p.order(*below, products_range);
    if (b >= 1) p.order(products_before, products_range);
    if (b >= 1) p.order(chain_lead, products_range);
    products_before = products_range;
    // The chain row by row (every dim's addition of row t, then row t + 1's), so that the
    // first rows' additions are one range of ops.
    const size_t first_chain = p.ops().size();
    for (size_t t = 0; t < products.size(); ++t) {
      xb = npu::attn_wsum_slow_chain(p, {products[t]}, xb);
      if (t + 1 == std::min(products.size(), kProductsLead)) chain_lead = compiler::OpRange{first_chain, p.ops().size()};
    }
  }
  // xb = hi 2^-26 (the xb RAM's window lies far above 2^-104, where hi = 0 and xb would be
  // lo 2^-71).
  for (int i = 0; i < hs; ++i) {
    r.xb.push_back(p.value("slow.xb"));
    npu::scale_acc(p, r.xb.back(), xb[at(i)].hi, 1.0f / npu::kWsumScale, "slow.xb");
  }
  compiler::enable_constants(p, first, on);
  as_.gate_clears(first, p.ops().size(), on);
  // Registered after the stage's: a head's out values are +0 whenever its segment's flag is.
  for (const HeadOps& h : head_ops) as_.gate_clears(h.begin, h.end, h.read);
  // The carry, parked when POS lies past the segment (hi and lo of every lane: values of the
  // window, 0 or in [2^-78, 2^35]).
  if (S > 1) {
    std::vector<ValueId> carry;
    for (const npu::TwoTier& x : xb) carry.insert(carry.end(), {x.hi, x.lo});
    cross_->carry(carry, on, r.more, "slow.carry_out");
  }
  return r;
}

ValueId AttentionStages::position_flag(size_t t, ValueId pos_copy, ValueId on, const std::string& label) {
  // d = POS - t + 1 when `on`, 0 otherwise (the copy of POS is 0 there, and the constant
  // reads `on`): max(d, 0) - 2 max(d - 1, 0) + max(d - 2, 0) = [d == 1], each max(x, 0) =
  // silu(128 x) / 128, exact on integers. One op of 3 neurons, no rail.
  compiler::Program& p = as_.program();
  const ValueId flag = p.value(label);
  std::vector<Neuron> ns;
  for (auto [k, w] : {std::pair{0, 1.0f}, std::pair{1, -2.0f}, std::pair{2, 1.0f}})
    ns.push_back(Neuron{Lin{{{pos_copy, 128.0f}, {on, 128.0f * (1.0f - static_cast<float>(t) - static_cast<float>(k))}}},
                        Lin{{{on, w / 128.0f}}}, {{flag, 1.0f}}});
  p.mlp(label, std::move(ns));
  as_.gate_own_clears({flag});
  return flag;
}

std::vector<std::pair<ValueId, float>> AttentionStages::qkv_sets(int layer) const {
  std::vector<std::pair<ValueId, float>> sets;
  for (size_t j = 0; j < vram_row_.size(); ++j)
    if ((layer >> j) & 1) sets.push_back({vram_row_[j], 1.0f});
  return sets;
}

std::vector<ValueId> AttentionStages::position_head(compiler::Program& p, const std::string& ram, size_t t,
                                                    const std::vector<std::vector<ValueId>>& data,
                                                    const std::vector<std::vector<ValueId>>& negated, const Inputs& stage,
                                                    const std::vector<ValueId>& query_bits, ValueId read, int low_binade) {
  npu::FloatRamHead h;
  h.data = data[t % 8];
  h.negated = negated[t % 8];
  h.key_bits = stage.row;
  h.write_flag = stage.block[t / 8];
  h.write_enable = stage.on;
  if (t / 8 >= stage.wipe.size() || t / 8 >= stage.block.size())
    fail("attention stages: position {} has no block flags in {}", t, ram);  // one wipe and one block flag per block
  h.wipe_flag = stage.wipe[t / 8];
  h.query_bits = query_bits;
  h.read_flag = read;
  h.out = p.values(ram + ".out" + std::to_string(t), static_cast<int>(h.data.size()));
  npu::float_ram(p, npu::FloatRamWindow{low_binade}, {h}, stage.on, ram + " RAM " + std::to_string(t));
  return h.out;
}

void AttentionStages::define(int first_lane, ValueId send, ValueId q_read, ValueId pos_read, bool chained) {
  const int H = g_.heads;
  auto with_bits = [](MicroOp& op, const std::vector<ValueId>& bits, int v) {
    for (size_t j = 0; j < bits.size(); ++j)
      if ((v >> j) & 1) op.sets.push_back({bits[j], 1.0f});
  };
  auto with_row = [&](MicroOp& op, int r) { with_bits(op, row_, r); };
  // Segment seg of S of a chain: while POS lies past it, a call of the crossing routine
  // (from `cross`) that returns to segment seg + 1 (`segment(seg + 1)`), else on to
  // `stop`; a segment after the first reads the carry register.
  auto segment_op = [&](int seg, int S, const std::string& cross, const std::string& stop,
                        const std::function<std::string(int)>& segment) {
    MicroOp op = seg + 1 < S ? as_.branch_step(cross, stop) : as_.step(stop);
    if (seg + 1 < S) op.call = as_.control_index(segment(seg + 1));
    if (seg >= 1) op.read_register = g_.carry_register;
    return op;
  };
  for (int l = 0; l < g_.layers; ++l) {
    for (int b = 0; b < g_.blocks(); ++b) {
      const int r = b / g_.groups(), g = b % g_.groups();
      const bool last = b + 1 == g_.blocks();
      MicroOp op = last ? as_.step(layer_name("MAX", l)) : as_.branch_step(block_name("SCORE", l, b + 1), layer_name("MAX", l));
      op.sets = {{score_.on, 1.0f},
                 {q_read, 1.0f},
                 {pos_read, 1.0f},
                 {cache_group_[at(l * g_.groups() + g)], 1.0f},
                 {score_.group[at(g)], 1.0f},
                 {score_.block[at(b)], 1.0f}};
      if (r == 0) op.sets.push_back({score_.wipe[at(g)], 1.0f});
      with_row(op, r);
      with_bits(op, cache_row_[at(l)], r);
      as_.define(block_name("SCORE", l, b), std::move(op));

      for (int hg = 0; hg < g_.exp_groups(); ++hg) {
        MicroOp e = hg + 1 < g_.exp_groups() ? as_.step(block_name("EXP", l, b) + "." + std::to_string(hg + 1))
                    : last                   ? as_.step(block_name("SUM", l, 0) + ".0")
                                             : as_.branch_step(block_name("EXP", l, b + 1) + ".0", block_name("SUM", l, 0) + ".0");
        e.sets = {{exp_.on, 1.0f},          {pos_read, 1.0f},
                  {max_back_, 1.0f},        {exp_.group[at(g)], 1.0f},
                  {exp_.block[at(b)], 1.0f}, {exp_head_group_[at(hg)], 1.0f}};
        if (hg == 0) e.sets.push_back({exp_.wipe[at(b)], 1.0f});
        with_row(e, r);
        with_bits(e, exp_.row, hg);
        as_.define(block_name("EXP", l, b) + "." + std::to_string(hg), std::move(e));
      }
    }
    // SUM(l).h.s: while POS lies past the segment, the acc crosses (the routine returns to
    // segment s + 1); POS's segment writes the sum RAM and goes on.
    for (int h = 0; h < H; ++h) {
      const std::string next = h + 1 < H ? block_name("SUM", l, h + 1) + ".0" : block_name("PROB", l, 0) + ".0";
      const int Ss = g_.sum_segments();
      for (int seg = 0; seg < Ss; ++seg) {
        MicroOp op = segment_op(seg, Ss, Ss > 1 ? cross_->first_cross(1) : next, next,
                                [&](int s) { return block_name("SUM", l, h) + "." + std::to_string(s); });
        op.sets = {{sum_on_, 1.0f}, {pos_read, 1.0f}, {sum_k_[at(h % g_.exp_heads)], 1.0f}, {sum_segment_[at(seg)], 1.0f}};
        if (h < g_.exp_heads) op.sets.push_back({sum_wipe_[at(h)], 1.0f});
        with_bits(op, exp_query_, h / g_.exp_heads);
        as_.define(block_name("SUM", l, h) + "." + std::to_string(seg), std::move(op));
      }
    }
    for (int b = 0; b < g_.blocks(); ++b)
      for (int hg = 0; hg < g_.exp_groups(); ++hg) {
        MicroOp op = hg + 1 < g_.exp_groups() ? as_.step(block_name("PROB", l, b) + "." + std::to_string(hg + 1))
                     : b + 1 < g_.blocks()    ? as_.branch_step(block_name("PROB", l, b + 1) + ".0", block_name("WSUM", l, 0) + ".0")
                                              : as_.step(block_name("WSUM", l, 0) + ".0");
        op.sets = {{prob_.on, 1.0f}, {prob_.block[at(b)], 1.0f}, {sum_back_, 1.0f}, {pos_read, 1.0f}};  // POS: the loop's branch
        if (hg == 0) op.sets.push_back({prob_.wipe[at(b)], 1.0f});
        with_bits(op, exp_query_, hg);
        with_bits(op, prob_.row, hg);
        as_.define(block_name("PROB", l, b) + "." + std::to_string(hg), std::move(op));
      }
    for (int h = 0; h < H; ++h) {
      // WSUM(l).h and its slow path go on to the next head (after the last: ATTO, or DONE).
      const std::string next = h + 1 < H ? block_name("WSUM", l, h + 1) + ".0" : chained ? block_name("ATTO", l, 0) : std::string("DONE");
      // SLOW(l).h.s: while POS lies past the segment, the carry crosses (the routine returns
      // to segment s + 1); POS's segment goes on to `next`.
      const int S = g_.slow_segments();
      for (int seg = 0; seg < S; ++seg) {
        MicroOp s = segment_op(seg, S, S > 1 ? cross_->first_cross(2 * static_cast<size_t>(g_.head_size)) : next, next,
                               [&](int k) { return slow_name(l, h, k); });
        s.sets = {{slow_on_, 1.0f},
                  {pos_read, 1.0f},  // the rows past POS, the branch
                  {slow_k_[at(h % g_.exp_heads)], 1.0f},
                  {slow_kv_[at(h / (H / g_.kv_heads))], 1.0f},
                  {slow_head_[at(h)], 1.0f},
                  {slow_segment_[at(seg)], 1.0f}};
        with_bits(s, exp_query_, h / g_.exp_heads);
        with_bits(s, g_.slow_shares_wsum_heads() ? wsum_vrow_ : slow_vrow_, l);
        as_.define(slow_name(l, h, seg), std::move(s));
      }
      // WSUM(l).h.s: while POS lies past the segment and no lane is unsafe, the state crosses
      // (the routine returns to segment s + 1); else WSUMX(l).h branches on the unsafe bit.
      const std::string wsumx = block_name("WSUMX", l, h);
      const int Sw = g_.wsum_segments();
      for (int seg = 0; seg < Sw; ++seg) {
        MicroOp op = segment_op(seg, Sw, Sw > 1 ? cross_->first_cross_of_floats(static_cast<size_t>(g_.head_size)) : wsumx,
                                wsumx, [&](int s) { return block_name("WSUM", l, h) + "." + std::to_string(s); });
        op.sets = {{wsum_on_, 1.0f},
                   {pos_read, 1.0f},
                   {wsum_k_[at(h % g_.exp_heads)], 1.0f},
                   {wsum_kv_[at(h / (H / g_.kv_heads))], 1.0f},
                   {wsum_head_[at(h)], 1.0f},
                   {wsum_segment_[at(seg)], 1.0f}};
        with_bits(op, exp_query_, h / g_.exp_heads);
        with_bits(op, wsum_vrow_, l);
        as_.define(block_name("WSUM", l, h) + "." + std::to_string(seg), std::move(op));
      }
      MicroOp x = as_.branch_step(slow_name(l, h, 0), next);  // on the unsafe bit
      x.sets = {{xb_back_, 1.0f}, {wsumx_head_[at(h)], 1.0f}};
      as_.define(wsumx, std::move(x));
    }
    // Chained, MAX goes on to the stages that read its result; else to its read-back.
    MicroOp op = as_.step(chained ? block_name("EXP", l, 0) + ".0" : name("RM", 0));
    op.sets = {{max_on_, 1.0f}, {pos_read, 1.0f}};
    as_.define(layer_name("MAX", l), std::move(op));
  }
  // Read-backs (4 cycles each): RS.h, RM.h, RE.h then RX.h, RSUM.h, RP.h then RPX.h.
  // Lanes: RS (H), RM (H), the exp read (k mant, k exponent for k < E), RSUM (k < E), the
  // prob read (k pm, k exponent).
  const int E = g_.exp_heads;
  const char* kinds[] = {"RS", "RM", "RE", "RX", "RSUM", "RP", "RPX"};
  const ValueId flags[] = {score_back_, max_back_, exp_back_, exp_back_, sum_back_, prob_back_, prob_back_};
  for (int k = 0; k < 7; ++k)
    for (int h = 0; h < H; ++h) {
      const std::string next = h + 1 < H ? name(kinds[k], h + 1)
                               : k == 2  ? name("RX", 0)
                               : k == 5  ? name("RPX", 0)
                                         : std::string("DONE");
      const int kh = h % E;
      const int lane = k < 2 ? k * H + h
                       : k < 4 ? 2 * H + 2 * kh + (k - 2)
                       : k == 4 ? 2 * H + 2 * E + kh
                                : 2 * H + 3 * E + 2 * kh + (k - 5);
      MicroOp op = as_.step(next);
      op.sets = {{send, 1.0f}, {flags[k], 1.0f}};
      op.lane = first_lane + lane;
      if (k == 0 || k == 2 || k == 3 || k == 5 || k == 6) op.sets.push_back({pos_read, 1.0f});
      if (k >= 2) with_bits(op, exp_query_, h / E);
      op.timing = SuccessorTiming::Delayed;
      as_.define(name(kinds[k], h), std::move(op));
    }
  if (cross_) cross_->define(first_lane + cross_lane_, send);
  // RXB(h).i: element i of head h's xb (i < head_size), then its unsafe bit (i = head_size).
  const int xb_lane = 2 * H + 5 * E;
  for (int h = 0; h < H; ++h)
    for (int i = 0; i <= g_.head_size; ++i) {
      MicroOp op = as_.step(i < g_.head_size ? block_name("RXB", h, i + 1) : std::string("DONE"));
      op.sets = {{send, 1.0f}, {xb_back_, 1.0f}};
      op.lane = first_lane + xb_lane + h * (g_.head_size + 1) + i;
      op.timing = SuccessorTiming::Delayed;
      as_.define(block_name("RXB", h, i), std::move(op));
    }
}

}  // namespace qpu::machine
