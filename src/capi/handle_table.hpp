// One table for the handles of every type. A handle is not a pointer: it is an id made of the
// handle's type, a slot and the slot's generation, so a freed, stale or foreign handle is
// recognised without touching memory, and a slot's new occupant never answers to an old handle
// (a slot is retired for good before its generation could wrap).
#pragma once
#include <cstdint>
#include <memory>

#include "core/error.hpp"
#include "nexus.h"

namespace nx::capi {

// The values of nx_handle_type (nexus.h).
enum class HandleKind : uint8_t {
  Tensor = NX_HANDLE_TENSOR,
  Stream = NX_HANDLE_STREAM,
  Event = NX_HANDLE_EVENT,
  Module = NX_HANDLE_MODULE,
  Optimizer = NX_HANDLE_OPTIMIZER,
  Tokenizer = NX_HANDLE_TOKENIZER,
  TextLoader = NX_HANDLE_TEXT_LOADER,
  SafeTensors = NX_HANDLE_SAFETENSORS,
  Graph = NX_HANDLE_GRAPH,
  Comm = NX_HANDLE_COMM,
  Ddp = NX_HANDLE_DDP,
  GradScaler = NX_HANDLE_GRAD_SCALER,
  Plan = NX_HANDLE_PLAN,
  Profile = NX_HANDLE_PROFILE,
};
constexpr int kHandleKinds = NX_HANDLE_PROFILE + 1;

const char* handle_kind_name(HandleKind kind);  // "tensor", "module"...
// Registers object under a new id (never 0). The table does not own the object.
uint64_t handle_insert(HandleKind kind, void* object);
// The object of a live id of this kind, else nullptr (freed, stale, foreign or another kind).
void* handle_lookup(uint64_t id, HandleKind kind);
// Unregisters a live id and returns its object; nullptr when the id is not live.
void* handle_remove(uint64_t id, HandleKind kind);
int64_t handle_count(HandleKind kind);

// Each handle's object type names its kind: NX_HANDLE_OBJECT(nx_module_s, Module).
template <class Obj> struct HandleKindOf;
#define NX_HANDLE_OBJECT(Obj, Kind) \
  template <> struct nx::capi::HandleKindOf<Obj> { static constexpr HandleKind kind = HandleKind::Kind; }

template <class Obj>
uint64_t handle_id(const Obj* handle) {
  return uint64_t(reinterpret_cast<uintptr_t>(handle));
}

// The C handle (Obj*) of a new object, which the table then owns until free_handle.
template <class Obj>
Obj* make_handle(std::unique_ptr<Obj> object) {
  const uint64_t id = handle_insert(HandleKindOf<Obj>::kind, object.get());
  object.release();
  return reinterpret_cast<Obj*>(uintptr_t(id));
}

// The object behind a handle argument; NX_ERR_INVALID_ARGUMENT when it is NULL or not live.
template <class Obj>
Obj& handle_object(const Obj* handle, const char* what) {
  constexpr HandleKind kind = HandleKindOf<Obj>::kind;
  if (!handle) fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " is NULL");
  void* object = handle_lookup(handle_id(handle), kind);
  if (!object)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " is not a live ", handle_kind_name(kind),
         " handle (already freed, or not created by NexusGrad)");
  return *static_cast<Obj*>(object);
}

// Frees a handle's object, calling release(object) first (to destroy what it owns outside the
// heap, a CUDA stream or event); NULL, freed and foreign handles are ignored (a free never crashes).
template <class Obj, class Release>
void free_handle(const Obj* handle, Release release) {
  if (!handle) return;
  auto* object = static_cast<Obj*>(handle_remove(handle_id(handle), HandleKindOf<Obj>::kind));
  if (!object) return;
  release(*object);
  delete object;
}
template <class Obj>
void free_handle(const Obj* handle) {
  free_handle(handle, [](Obj&) {});
}

}  // namespace nx::capi
