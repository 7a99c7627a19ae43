// Every kernel launch of the CUDA backend, with programmatic dependent launch
// (PDL, sm_90): a kernel may be scheduled while the one before it in the stream
// is still running, and waits at its top (grid_dependency()) until that one has
// completed and its writes are visible. A decode step is many small kernels
// whose time goes to the gaps between them; PDL hides the launch of each next
// kernel behind the one running.
//
// Ordering stays as without PDL: every kernel calls grid_dependency() before it
// reads or writes anything but weights (see grid_wait), and griddepcontrol.wait waits for the whole previous
// grid (not just its trigger), which itself waited for its own predecessor, so
// each kernel still follows every earlier one, reads and writes alike. Work that
// is not one of these kernels (cuBLAS, memcpy, memset) is ordered by the stream
// as usual: the attribute only relaxes this kernel against a kernel before it.
//
// Captured steps: a launch with this attribute under stream capture becomes a
// graph edge of type cudaGraphDependencyTypeProgrammatic from the previous
// kernel node's cudaGraphKernelNodePortProgrammatic port (CUDA 12.3 and later;
// driver_types.h), so replays overlap the same way.
//
// INFERD_CUDA_PDL=0 in the environment (read once) launches without the
// attribute, so a benchmark can compare both; the waits are then no-ops.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace inferd::kernels::cuda {

// The two halves of grid_dependency(). Between them a kernel may read what no
// kernel writes (weights, uploaded before the step), so that round trip overlaps
// the end of the kernel before it.
__device__ __forceinline__ void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// At the top of every kernel, before any memory access or early return: lets the
// next kernel be scheduled, then waits for the previous one.
__device__ __forceinline__ void grid_dependency() {
  grid_launch_dependents();
  grid_wait();
}

// Whether launches on the current device carry the PDL attribute: not when
// INFERD_CUDA_PDL=0, nor below compute capability 9.0. Cached per device.
inline bool pdl_enabled() {
  static const bool allowed = [] {
    const char* e = std::getenv("INFERD_CUDA_PDL");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  if (!allowed) return false;
  constexpr int kDevices = 64;
  static std::atomic<signed char> known[kDevices] = {};  // 0 unknown, 1 yes, -1 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  signed char k = dev < kDevices ? known[dev].load(std::memory_order_relaxed) : 0;
  if (k == 0) {
    int major = 0;
    k = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 ? 1 : -1;
    if (dev < kDevices) known[dev].store(k, std::memory_order_relaxed);
  }
  return k > 0;
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute. A
// failed launch is the thread's last CUDA error, which the caller's
// check_launch reports with its op's name, as it did for <<<>>>.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace inferd::kernels::cuda
