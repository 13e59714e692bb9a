// The number of SMs of the current device, which the launchers size their grids by. Asked of
// the driver once per device and cached; 132 (an H100 SXM) when the driver cannot say.
#pragma once

namespace hearth::kernels {

int device_sm_count();

}  // namespace hearth::kernels
