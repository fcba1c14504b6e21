// CUDA graphs of compiled plans (src/compile/plan.cpp): the plan's op list is enqueued once on a
// private stream under capture, and the graph is launched with one call per replay. Capture runs
// in relaxed mode so that what kernels do on the host while enqueueing (cuBLAS set-up, a table
// copied for the graph) is allowed; the private stream is non-blocking, so the legacy stream
// never joins the capture. Scratch blocks the kernels allocate while captured belong to that
// stream and stay reserved for the graph (allocator.cu, hold_stream_blocks).
#include <memory>
#include <vector>

#include "core/cuda_iface.hpp"
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

struct Graph {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<void*> owned;  // graph_owned_copy's buffers
};

thread_local Graph* tl_capturing = nullptr;

void destroy(Graph* g) {
  cudaSetDevice(g->device);
  count_host_sync();
  cudaDeviceSynchronize();  // no launch of it may still read its memory
  if (g->exec) cudaGraphExecDestroy(g->exec);
  if (g->graph) cudaGraphDestroy(g->graph);
  for (void* p : g->owned) cudaFree(p);
  if (g->stream) {
    release_stream_blocks(g->device, g->stream);
    cudaStreamDestroy(g->stream);
  }
  delete g;
}

}  // namespace

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  NX_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

const void* graph_owned_copy(const void* host, size_t n) {
  if (!tl_capturing)
    fail(NX_ERR_STATE, current_api(), ": a kernel was captured into a CUDA graph outside nx_plan_run's capture");
  void* p = nullptr;
  NX_CUDA_CHECK(cudaMalloc(&p, n));
  tl_capturing->owned.push_back(p);
  NX_CUDA_CHECK(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice));  // synchronous: no stream is involved
  return p;
}

void* graph_capture(int device, const std::function<void(void* stream)>& record) {
  NX_CUDA_CHECK(cudaSetDevice(device));
  std::unique_ptr<Graph, void (*)(Graph*)> g(new Graph(), destroy);
  g->device = device;
  NX_CUDA_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  hold_stream_blocks(device, g->stream);
  NX_CUDA_CHECK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeRelaxed));
  tl_capturing = g.get();
  try {
    record(g->stream);
  } catch (...) {
    tl_capturing = nullptr;
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(g->stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  tl_capturing = nullptr;
  NX_CUDA_CHECK(cudaStreamEndCapture(g->stream, &g->graph));
  NX_CUDA_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0));
  return g.release();
}

void graph_launch(void* graph, void* stream) {
  Graph* g = static_cast<Graph*>(graph);
  NX_CUDA_CHECK(cudaSetDevice(g->device));
  NX_CUDA_CHECK(cudaGraphLaunch(g->exec, static_cast<cudaStream_t>(stream)));
}

void graph_destroy(void* graph) {
  if (graph) destroy(static_cast<Graph*>(graph));
}

}  // namespace nx::cuda
