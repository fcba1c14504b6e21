#include "io/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <queue>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "core/error.hpp"
#include "core/atomic_file.hpp"

namespace nx {
namespace {

// Chunks of the text: a new chunk starts at whitespace that follows a non-space, so each chunk
// is a whitespace run plus the word after it (" whale", "\n\nCall"); merges stay inside chunks.
std::vector<std::string> chunks(const std::string& text) {
  auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (!cur.empty() && space(c) && !space(cur.back())) {
      out.push_back(cur);
      cur.clear();
    }
    cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

uint64_t pair_key(int64_t a, int64_t b) { return (uint64_t(a) << 32) | uint64_t(b); }

// Bounds of a tokenizer (issue 17): a merge's piece is the two pieces it joins, so a few hundred
// bytes of merges that each double the last piece would describe gigabytes. Real vocabularies
// (GPT-2: 50k merges; the largest common ones ~256k, pieces of tens of bytes) stay far below.
constexpr size_t kMaxPieceBytes = size_t(1) << 16;         // 64 KiB per token
constexpr size_t kMaxTotalPieceBytes = size_t(1) << 26;    // 64 MiB over all tokens
constexpr int64_t kMaxMerges = int64_t(1) << 20;           // 1,048,576 merges
constexpr uint64_t kMaxTokenizerFileBytes = 64 + uint64_t(kMaxMerges) * 32;  // header + the longest lines, generously

}  // namespace

Tokenizer Tokenizer::bytes() {
  Tokenizer t;
  for (int i = 0; i < 256; ++i) t.pieces_.push_back(std::string(1, char(i)));
  return t;
}

void Tokenizer::add_merge(int64_t a, int64_t b) {
  merges_.emplace_back(a, b);
  pieces_.push_back(pieces_[size_t(a)] + pieces_[size_t(b)]);
}

Tokenizer Tokenizer::train_bpe(const std::string& corpus, int64_t vocab_size) {
  if (vocab_size < 256)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": a BPE vocabulary needs at least the 256 byte tokens, got ", vocab_size);
  Tokenizer t = bytes();
  std::unordered_map<std::string, int64_t> freq;
  for (auto& c : chunks(corpus)) ++freq[c];
  struct Word {
    std::vector<int64_t> ids;
    int64_t freq;
  };
  std::vector<Word> words;
  for (auto& [chunk, f] : freq) {
    Word w{{}, f};
    for (unsigned char ch : chunk) w.ids.push_back(ch);
    words.push_back(std::move(w));
  }

  // Counted once, then kept current: a merge recounts only the words that hold its pair (found
  // through `holders`, which may list words that no longer do). The queue holds (count, pair)
  // entries; one whose count is no longer the pair's is stale and dropped when it comes up.
  // Ordered by count, then the smaller pair first, so training is deterministic.
  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<uint32_t>> holders;
  auto entry_less = [](const std::pair<int64_t, uint64_t>& x, const std::pair<int64_t, uint64_t>& y) {
    return x.first < y.first || (x.first == y.first && x.second > y.second);
  };
  std::priority_queue<std::pair<int64_t, uint64_t>, std::vector<std::pair<int64_t, uint64_t>>, decltype(entry_less)> queue(entry_less);
  auto add_pairs = [&](uint32_t w, int64_t sign, std::vector<uint64_t>& touched) {
    const auto& ids = words[w].ids;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      uint64_t key = pair_key(ids[i], ids[i + 1]);
      counts[key] += sign * words[w].freq;
      touched.push_back(key);
      if (sign > 0) holders[key].push_back(w);
    }
  };
  std::vector<uint64_t> touched;
  for (uint32_t w = 0; w < words.size(); ++w) add_pairs(w, +1, touched);
  for (auto& [key, n] : counts) queue.emplace(n, key);

  size_t total_piece_bytes = 256;
  while (t.vocab_size() < vocab_size && int64_t(t.merges_.size()) < kMaxMerges) {
    // A pair whose piece would pass the loader's limit is never learned (its pieces never change),
    // so every trained tokenizer loads.
    auto joined_bytes = [&](uint64_t key) { return t.pieces_[size_t(key >> 32)].size() + t.pieces_[size_t(key & 0xffffffffu)].size(); };
    uint64_t best = 0;
    int64_t best_count = 0;
    while (!queue.empty()) {
      auto [n, key] = queue.top();
      queue.pop();
      auto it = counts.find(key);
      if (it == counts.end() || it->second != n || joined_bytes(key) > kMaxPieceBytes) continue;
      best = key, best_count = n;
      break;
    }
    if (best_count < 2) break;
    total_piece_bytes += joined_bytes(best);
    if (total_piece_bytes > kMaxTotalPieceBytes) break;
    int64_t a = int64_t(best >> 32), b = int64_t(best & 0xffffffffu), id = t.vocab_size();
    t.add_merge(a, b);
    std::vector<uint32_t> holding = std::move(holders[best]);
    holders.erase(best);
    std::sort(holding.begin(), holding.end());
    holding.erase(std::unique(holding.begin(), holding.end()), holding.end());
    touched.clear();
    for (uint32_t w : holding) {
      auto& ids = words[w].ids;
      bool holds = false;
      for (size_t i = 0; i + 1 < ids.size() && !holds; ++i) holds = ids[i] == a && ids[i + 1] == b;
      if (!holds) continue;
      add_pairs(w, -1, touched);
      std::vector<int64_t> merged;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
          merged.push_back(id);
          ++i;
        } else {
          merged.push_back(ids[i]);
        }
      }
      ids.swap(merged);
      add_pairs(w, +1, touched);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t key : touched) {
      auto it = counts.find(key);
      if (it->second == 0) counts.erase(it);
      else queue.emplace(it->second, key);
    }
  }
  return t;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  std::unordered_map<uint64_t, int64_t> rank;
  for (size_t i = 0; i < merges_.size(); ++i) rank[pair_key(merges_[i].first, merges_[i].second)] = int64_t(i);
  std::vector<int64_t> out;
  for (auto& c : chunks(text)) {
    std::vector<int64_t> ids;
    for (unsigned char ch : c) ids.push_back(ch);
    while (ids.size() > 1) {  // apply the earliest-learned merge present, as in training
      int64_t best = -1;
      size_t at = 0;
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        auto it = rank.find(pair_key(ids[i], ids[i + 1]));
        if (it != rank.end() && (best < 0 || it->second < best)) { best = it->second; at = i; }
      }
      if (best < 0) break;
      std::vector<int64_t> merged(ids.begin(), ids.begin() + int64_t(at));
      for (size_t i = at; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == merges_[size_t(best)].first && ids[i + 1] == merges_[size_t(best)].second) {
          merged.push_back(256 + best);
          ++i;
        } else {
          merged.push_back(ids[i]);
        }
      }
      ids.swap(merged);
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size())
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": token id ", id, " is outside the vocabulary of ", vocab_size());
    s += pieces_[size_t(id)];
  }
  return s;
}

void Tokenizer::save(const std::string& path) const {
  std::ostringstream text;
  text << "nexusgrad-bpe 1\n" << merges_.size() << "\n";
  for (auto& [a, b] : merges_) text << a << " " << b << "\n";
  AtomicFile f(path);  // a failed or interrupted save leaves the previous file at path
  f.write(text.str());
  f.commit();
}

Tokenizer Tokenizer::load(const std::string& path) {
  // The file, as save writes it: "nexusgrad-bpe 1\n", the merge count, then one "a b\n" line per
  // merge (decimal ids, one space). Anything else is refused, including trailing junk in a number
  // ("12abc"), extra lines, and merges past the piece limits (see kMaxPieceBytes).
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail(NX_ERR_IO, current_api(), ": cannot open ", path);
  const std::streamoff end = f.tellg();
  if (end < 0) fail(NX_ERR_IO, current_api(), ": cannot find the size of ", path, " (not a regular file?)");
  if (uint64_t(end) > kMaxTokenizerFileBytes)
    fail(NX_ERR_IO, current_api(), ": ", path, " is ", end, " bytes, more than a tokenizer file of at most ",
         kMaxMerges, " merges can be (", kMaxTokenizerFileBytes, " bytes)");
  std::string text(size_t(end), '\0');
  f.seekg(0);
  if (!f.read(text.data(), std::streamsize(text.size()))) fail(NX_ERR_IO, current_api(), ": read error on ", path);

  size_t pos = 0, line_no = 0;
  // File text echoed in a message: at most 40 bytes, control and non-ASCII bytes as \xNN.
  auto shown = [](std::string_view piece) {
    std::string out;
    for (unsigned char c : piece.substr(0, 40)) {
      if (c >= 0x20 && c < 0x7f) { out += char(c); continue; }
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    }
    return out;
  };
  auto bad = [&](const auto&... why) { fail(NX_ERR_IO, current_api(), ": ", path, ": line ", line_no, ": ", why...); };
  // The next line without its '\n' (and a '\r' before it); false at the end of the file.
  auto next_line = [&](std::string_view& line) {
    if (pos >= text.size()) return false;
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    line = std::string_view(text).substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = nl + 1;
    ++line_no;
    return true;
  };
  // A decimal number, digits only: no sign, no leading zero, nothing after it.
  auto number = [&](std::string_view digits, const std::string& what, uint64_t limit) {
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
      bad(what, " \"", shown(digits), "\" is not a decimal number (digits only)");
    if (digits.size() > 1 && digits[0] == '0') bad(what, " \"", shown(digits), "\" has a leading zero");
    if (digits.size() > 19) bad(what, " ", shown(digits), " is above the largest allowed, ", limit);
    uint64_t value = 0;
    for (char c : digits) value = value * 10 + uint64_t(c - '0');  // 19 digits fit in uint64
    if (value > limit) bad(what, " ", value, " is above the largest allowed, ", limit);
    return value;
  };

  std::string_view line;
  if (!next_line(line) || line != "nexusgrad-bpe 1") {
    if (line.substr(0, 14) == "nexusgrad-bpe ")
      bad("unsupported tokenizer file version \"", shown(line.substr(14)), "\" (this build reads 1)");
    fail(NX_ERR_IO, current_api(), ": ", path, " is not a NexusGrad tokenizer file (the first line is not \"nexusgrad-bpe 1\")");
  }
  if (!next_line(line)) bad("the merge count is missing");
  const uint64_t n = number(line, "merge count", uint64_t(kMaxMerges));
  Tokenizer t = bytes();
  size_t total_piece_bytes = 256;
  std::unordered_map<uint64_t, uint64_t> seen;  // pair -> its merge index
  for (uint64_t i = 0; i < n; ++i) {
    if (!next_line(line)) bad("merge ", i, " is missing (the file declares ", n, " merges)");
    const size_t space = line.find(' ');
    if (space == std::string_view::npos)
      bad("merge ", i, " \"", shown(line), "\" is not two token ids separated by one space");
    const uint64_t known = uint64_t(t.vocab_size()) - 1;  // a merge may use only tokens made before it
    const uint64_t a = number(line.substr(0, space), cat("merge ", i, ": the first token id"), known);
    const uint64_t b = number(line.substr(space + 1), cat("merge ", i, ": the second token id"), known);
    const size_t piece = t.pieces_[a].size() + t.pieces_[b].size();
    if (piece > kMaxPieceBytes)
      bad("merge ", i, " (", a, " ", b, ") makes a piece of ", piece, " bytes, more than the limit of ", kMaxPieceBytes);
    if (total_piece_bytes + piece > kMaxTotalPieceBytes)
      bad("merge ", i, " (", a, " ", b, ") brings the pieces past the limit of ", kMaxTotalPieceBytes, " bytes in all");
    const auto [it, fresh] = seen.emplace(pair_key(int64_t(a), int64_t(b)), i);
    if (!fresh) bad("merge ", i, " (", a, " ", b, ") repeats merge ", it->second);
    total_piece_bytes += piece;
    t.add_merge(int64_t(a), int64_t(b));
  }
  if (pos < text.size()) {
    ++line_no;
    bad("unexpected text after the ", n, " declared merges");
  }
  return t;
}

TextBatches::TextBatches(std::vector<int64_t> tokens, int64_t batch, int64_t seq, uint64_t seed)
    : tokens_(std::move(tokens)), batch_(batch), seq_(seq), state_(seed * 6364136223846793005ULL + 1442695040888963407ULL) {
  if (batch <= 0 || seq <= 0) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": batch and seq must be positive");
  int64_t elements;
  if (__builtin_mul_overflow(batch, seq, &elements))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": batch ", batch, " times seq ", seq, " overflows int64");
  if (int64_t(tokens_.size()) < seq + 1)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": the corpus has ", tokens_.size(), " tokens, fewer than seq + 1 = ", seq + 1);
  // Non-overlapping windows, visited in a fresh random order every epoch.
  for (int64_t s = 0; s + seq + 1 <= int64_t(tokens_.size()); s += seq) order_.push_back(s);
  reshuffle();
}

void TextBatches::reshuffle() {
  for (size_t i = order_.size(); i > 1; --i) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    size_t j = size_t((state_ >> 33) % i);
    std::swap(order_[i - 1], order_[j]);
  }
  cursor_ = 0;
}

void TextBatches::next(int64_t* inputs, int64_t* targets) {
  for (int64_t gb = 0; gb < batch_ * world_; ++gb) {
    if (cursor_ == order_.size()) reshuffle();
    int64_t s = order_[cursor_++];
    const int64_t b = gb - rank_ * batch_;  // row in this rank's block
    if (b < 0 || b >= batch_) continue;
    for (int64_t i = 0; i < seq_; ++i) {
      inputs[b * seq_ + i] = tokens_[size_t(s + i)];
      targets[b * seq_ + i] = tokens_[size_t(s + i + 1)];
    }
  }
}

int64_t TextBatches::batches_per_epoch() const {
  return std::max<int64_t>(1, int64_t(order_.size()) / (batch_ * world_));
}

void TextBatches::shard(int64_t rank, int64_t world) {
  if (world < 1 || rank < 0 || rank >= world)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": rank ", rank, " and world size ", world,
         " do not fit (need world >= 1 and 0 <= rank < world)");
  // batch * world is the global batch; its wrap to 0 once divided batches_per_epoch (issue 17).
  int64_t global_batch;
  if (__builtin_mul_overflow(batch_, world, &global_batch) || __builtin_mul_overflow(global_batch, seq_, &global_batch))
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": batch ", batch_, " times world size ", world, " times seq ", seq_,
         " overflows int64");
  rank_ = rank;
  world_ = world;
}

}  // namespace nx
