#include "io/tokenizer.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "core/error.hpp"

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
  std::vector<std::pair<std::vector<int64_t>, int64_t>> words;
  for (auto& [w, f] : freq) {
    std::vector<int64_t> ids;
    for (unsigned char ch : w) ids.push_back(ch);
    words.emplace_back(std::move(ids), f);
  }
  while (t.vocab_size() < vocab_size) {
    std::unordered_map<uint64_t, int64_t> counts;
    for (auto& [ids, f] : words)
      for (size_t i = 0; i + 1 < ids.size(); ++i) counts[pair_key(ids[i], ids[i + 1])] += f;
    if (counts.empty()) break;
    // Most frequent pair; ties broken by the smaller key so training is deterministic.
    auto best = counts.begin();
    for (auto it = counts.begin(); it != counts.end(); ++it)
      if (it->second > best->second || (it->second == best->second && it->first < best->first)) best = it;
    if (best->second < 2) break;
    int64_t a = int64_t(best->first >> 32), b = int64_t(best->first & 0xffffffffu), id = t.vocab_size();
    t.add_merge(a, b);
    for (auto& [ids, f] : words) {
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
  std::ofstream f(path);
  if (!f) fail(NX_ERR_IO, current_api(), ": cannot write ", path);
  f << "nexusgrad-bpe 1\n" << merges_.size() << "\n";
  for (auto& [a, b] : merges_) f << a << " " << b << "\n";
  if (!f) fail(NX_ERR_IO, current_api(), ": write error on ", path);
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail(NX_ERR_IO, current_api(), ": cannot open ", path);
  std::string magic;
  int version = 0;
  size_t n = 0;
  if (!(f >> magic >> version >> n) || magic != "nexusgrad-bpe" || version != 1)
    fail(NX_ERR_IO, current_api(), ": ", path, " is not a NexusGrad tokenizer file");
  Tokenizer t = bytes();
  for (size_t i = 0; i < n; ++i) {
    int64_t a, b;
    if (!(f >> a >> b) || a < 0 || b < 0 || a >= t.vocab_size() || b >= t.vocab_size())
      fail(NX_ERR_IO, current_api(), ": ", path, ": merge ", i, " is missing or refers to unknown tokens");
    t.add_merge(a, b);
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
