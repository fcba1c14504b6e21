// Byte-level and byte-pair-encoding tokenizers. Tokens 0..255 are the bytes themselves, so any
// byte string (any UTF-8 text) encodes and decodes back exactly; BPE adds merged tokens learned
// from a corpus (word-internal merges: text is pre-split before each space or newline run).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nx {

class Tokenizer {
 public:
  static Tokenizer bytes();
  static Tokenizer train_bpe(const std::string& corpus, int64_t vocab_size);
  static Tokenizer load(const std::string& path);
  void save(const std::string& path) const;
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const { return int64_t(pieces_.size()); }

 private:
  void add_merge(int64_t a, int64_t b);
  std::vector<std::pair<int64_t, int64_t>> merges_;  // merge i makes token 256 + i
  std::vector<std::string> pieces_;                   // bytes of every token
};

// Shuffled (input, target) windows of a token stream: target = input shifted by one.
class TextBatches {
 public:
  TextBatches(std::vector<int64_t> tokens, int64_t batch, int64_t seq, uint64_t seed);
  // Fills [batch, seq] inputs and targets (host arrays of batch * seq each).
  void next(int64_t* inputs, int64_t* targets);
  int64_t batches_per_epoch() const;
  // Data parallelism: every rank walks the same shuffled order (same seed) in global batches of
  // batch * world windows and keeps rows [rank * batch, (rank + 1) * batch), so world ranks see
  // exactly the windows one process with batch * world would.
  void shard(int64_t rank, int64_t world);
  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }

 private:
  std::vector<int64_t> tokens_;
  int64_t batch_, seq_;
  uint64_t state_;
  std::vector<int64_t> order_;
  size_t cursor_ = 0;
  int64_t rank_ = 0, world_ = 1;
  void reshuffle();
};

}  // namespace nx
