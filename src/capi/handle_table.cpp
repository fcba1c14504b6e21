#include "capi/handle_table.hpp"

#include <mutex>
#include <vector>

namespace nx::capi {
namespace {

// id = kind (8 bits) | generation (24 bits) | slot + 1 (32 bits)
constexpr uint32_t kMaxGeneration = (1u << 24) - 1;

struct Slot {
  void* object = nullptr;
  uint32_t generation = 0;  // of the current or last occupant
  HandleKind kind{};
  bool live = false;
};

struct Table {
  std::mutex mutex;
  std::vector<Slot> slots;
  std::vector<uint32_t> free_slots;
  int64_t counts[kHandleKinds] = {};
};

Table& table() {
  static auto* t = new Table();  // never destroyed: handles may be freed during static destruction
  return *t;
}

uint64_t encode(HandleKind kind, uint32_t generation, uint32_t slot) {
  return uint64_t(kind) << 56 | uint64_t(generation) << 32 | (uint64_t(slot) + 1);
}

// The live slot an id names, or nullptr; the caller holds the mutex.
Slot* find(Table& t, uint64_t id, HandleKind kind) {
  if (uint8_t(id >> 56) != uint8_t(kind)) return nullptr;
  const uint64_t low = id & 0xffffffffu;
  if (low == 0 || low > t.slots.size()) return nullptr;
  Slot& s = t.slots[size_t(low - 1)];
  if (!s.live || s.kind != kind || s.generation != uint32_t(id >> 32 & kMaxGeneration)) return nullptr;
  return &s;
}

}  // namespace

const char* handle_kind_name(HandleKind kind) {
  switch (kind) {
    case HandleKind::Tensor: return "tensor";
    case HandleKind::Stream: return "stream";
    case HandleKind::Event: return "event";
    case HandleKind::Module: return "module";
    case HandleKind::Optimizer: return "optimizer";
    case HandleKind::Tokenizer: return "tokenizer";
    case HandleKind::TextLoader: return "text loader";
    case HandleKind::SafeTensors: return "SafeTensors file";
    case HandleKind::Graph: return "graph";
    case HandleKind::Comm: return "communicator";
    case HandleKind::Ddp: return "nx_ddp";
    case HandleKind::GradScaler: return "gradient scaler";
    case HandleKind::Plan: return "plan";
    case HandleKind::Profile: return "profile";
  }
  return "unknown";
}

uint64_t handle_insert(HandleKind kind, void* object) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  uint32_t slot;
  if (!t.free_slots.empty()) {
    slot = t.free_slots.back();
    t.free_slots.pop_back();
  } else {
    if (t.slots.size() >= 0xffffffffu) fail(NX_ERR_OUT_OF_MEMORY, current_api(), ": out of handles");
    t.slots.emplace_back();
    slot = uint32_t(t.slots.size() - 1);
  }
  Slot& s = t.slots[slot];
  s = Slot{object, s.generation + 1, kind, true};
  ++t.counts[int(kind)];
  return encode(kind, s.generation, slot);
}

void* handle_lookup(uint64_t id, HandleKind kind) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Slot* s = find(t, id, kind);
  return s ? s->object : nullptr;
}

void* handle_remove(uint64_t id, HandleKind kind) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Slot* s = find(t, id, kind);
  if (!s) return nullptr;
  void* object = s->object;
  s->object = nullptr;
  s->live = false;
  --t.counts[int(kind)];
  // A slot whose generation is spent is never reused, so no later handle can equal an old one.
  if (s->generation < kMaxGeneration) t.free_slots.push_back(uint32_t(s - t.slots.data()));
  return object;
}

int64_t handle_count(HandleKind kind) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.counts[int(kind)];
}

}  // namespace nx::capi
