// User objects: reference counts held by callers, graphs and executables; the destructor
// runs once, on a separate thread, when the last reference is gone.
#include "emu.hpp"

namespace emu {
namespace {

// Drops n references; the last one schedules the destructor on its own thread. Unlocks lk.
void release_locked(std::unique_lock<std::mutex>& lk, UserObject* o, unsigned n) {
  State& s = state();
  o->refcount -= n;
  if (o->refcount != 0) return;
  s.user_objects.erase(o);
  s.live.fetch_sub(1);
  lk.unlock();
  CUhostFn fn = o->destroy;
  void* ptr = o->ptr;
  delete o;
  run_detached([fn, ptr] {
    {
      const CallbackScope in_callback;
      fn(ptr);
    }
    note_destructor_run();
  });
}

UserObject* as_object(CUuserObject o) {  // requires uo_mu
  return valid(state().user_objects, o) ? reinterpret_cast<UserObject*>(o) : nullptr;
}

CUresult user_object_create(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned int initial,
                            unsigned int flags) {
  EMU_ENTER("cuUserObjectCreate");
  if (!out || !destroy || initial == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
    return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.uo_mu);
  auto* o = new UserObject;
  o->ptr = ptr;
  o->destroy = destroy;
  o->refcount = initial;
  s.user_objects.insert(o);
  s.live.fetch_add(1);
  *out = reinterpret_cast<CUuserObject>(o);
  return CUDA_SUCCESS;
}

CUresult user_object_retain(CUuserObject h, unsigned int count) {
  EMU_ENTER("cuUserObjectRetain");
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.uo_mu);
  UserObject* o = as_object(h);
  if (!o) return CUDA_ERROR_INVALID_VALUE;
  o->refcount += count;
  return CUDA_SUCCESS;
}

CUresult user_object_release(CUuserObject h, unsigned int count) {
  EMU_ENTER("cuUserObjectRelease");
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock<std::mutex> lk(state().uo_mu);
  UserObject* o = as_object(h);
  if (!o || o->refcount < count) return CUDA_ERROR_INVALID_VALUE;
  release_locked(lk, o, count);
  return CUDA_SUCCESS;
}

CUresult graph_retain_user_object(CUgraph hg, CUuserObject h, unsigned int count,
                                  unsigned int flags) {
  EMU_ENTER("cuGraphRetainUserObject");
  if (count == 0 || (flags & ~static_cast<unsigned>(CU_GRAPH_USER_OBJECT_MOVE)))
    return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (!valid(s.graphs, hg)) return CUDA_ERROR_INVALID_VALUE;
  auto* g = reinterpret_cast<Graph*>(hg);
  auto* o = reinterpret_cast<UserObject*>(h);
  {
    std::lock_guard<std::mutex> ulk(s.uo_mu);
    if (!as_object(h)) return CUDA_ERROR_INVALID_VALUE;
    if (!(flags & CU_GRAPH_USER_OBJECT_MOVE)) o->refcount += count;
  }
  g->refs->refs[o] += count;
  return CUDA_SUCCESS;
}

CUresult graph_release_user_object(CUgraph hg, CUuserObject h, unsigned int count) {
  EMU_ENTER("cuGraphReleaseUserObject");
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (!valid(s.graphs, hg)) return CUDA_ERROR_INVALID_VALUE;
  auto* g = reinterpret_cast<Graph*>(hg);
  auto* o = reinterpret_cast<UserObject*>(h);
  auto it = g->refs->refs.find(o);
  if (it == g->refs->refs.end() || it->second < count) return CUDA_ERROR_INVALID_VALUE;
  it->second -= count;
  if (it->second == 0) g->refs->refs.erase(it);
  user_object_sub(o, count);
  return CUDA_SUCCESS;
}

}  // namespace

RefSet::~RefSet() {
  for (const auto& [obj, count] : refs) user_object_sub(obj, count);
}

void user_object_add(UserObject* o, unsigned n) {
  std::lock_guard<std::mutex> lk(state().uo_mu);
  o->refcount += n;
}

void user_object_sub(UserObject* o, unsigned n) {
  std::unique_lock<std::mutex> lk(state().uo_mu);
  release_locked(lk, o, n);
}

void register_user_object_entries(std::vector<Entry>& out) {
  out.insert(out.end(), {
                            EMU_ENTRY(cuUserObjectCreate, 11030, user_object_create),
                            EMU_ENTRY(cuUserObjectRetain, 11030, user_object_retain),
                            EMU_ENTRY(cuUserObjectRelease, 11030, user_object_release),
                            EMU_ENTRY(cuGraphRetainUserObject, 11030, graph_retain_user_object),
                            EMU_ENTRY(cuGraphReleaseUserObject, 11030, graph_release_user_object),
                        });
}

}  // namespace emu
