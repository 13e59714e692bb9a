// The CUDA driver entry points hearth uses for VMM (create, reserve, map, export, import),
// resolved at run time through the runtime's cudaGetDriverEntryPointByVersion. Nothing links
// libcuda, so every binary starts on a machine without a GPU or driver.
#pragma once

#include <cuda.h>

namespace hearth {

struct CudaDriver {
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemAddressReserve) address_reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemGetAccess) get_access = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) import_handle = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetUuid) device_uuid = nullptr;
  decltype(&::cuGetErrorString) error_string = nullptr;

  // Resolves every entry point once; throws std::runtime_error when the driver is missing.
  static const CudaDriver& get();
};

// Throws std::runtime_error naming `what` and the driver's message when `result` is an error.
void check_cu(CUresult result, const char* what);

}  // namespace hearth
