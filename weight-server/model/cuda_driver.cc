#include "weight-server/model/cuda_driver.h"

#include <cuda_runtime.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace hearth {

namespace {

template <typename Fn>
void resolve(Fn& fn, const char* symbol) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || !p)
    throw std::runtime_error(std::string("CUDA driver entry point ") + symbol +
                             " is unavailable (no driver? " + cudaGetErrorString(err) + ")");
  fn = reinterpret_cast<Fn>(p);
}

}  // namespace

const CudaDriver& CudaDriver::get() {
  static CudaDriver driver;
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    try {
      resolve(driver.mem_create, "cuMemCreate");
      resolve(driver.mem_release, "cuMemRelease");
      resolve(driver.address_reserve, "cuMemAddressReserve");
      resolve(driver.address_free, "cuMemAddressFree");
      resolve(driver.mem_map, "cuMemMap");
      resolve(driver.mem_unmap, "cuMemUnmap");
      resolve(driver.set_access, "cuMemSetAccess");
      resolve(driver.get_access, "cuMemGetAccess");
      resolve(driver.granularity, "cuMemGetAllocationGranularity");
      resolve(driver.export_handle, "cuMemExportToShareableHandle");
      resolve(driver.import_handle, "cuMemImportFromShareableHandle");
      resolve(driver.device_get, "cuDeviceGet");
      resolve(driver.device_uuid, "cuDeviceGetUuid");
      resolve(driver.error_string, "cuGetErrorString");
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  return driver;
}

void check_cu(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const char* text = nullptr;
  try {
    CudaDriver::get().error_string(result, &text);
  } catch (...) {
  }
  throw std::runtime_error(std::string("CUDA driver error in ") + what + ": " +
                           (text ? text : ("code " + std::to_string(int(result))).c_str()));
}

}  // namespace hearth
