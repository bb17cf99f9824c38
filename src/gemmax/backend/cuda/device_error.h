// The errors kernels record in device memory (kern::DeviceError), turned into a gemmax::Error at
// the step's synchronisation point.
#pragma once

#include "gemmax/backend/cuda/kernels/kernel_base.h"

namespace gemmax::cuda {

// Throws the gemmax::Error that names what the kernel found; does nothing for kNone.
void raise_device_error(const kern::DeviceError& e);

}  // namespace gemmax::cuda
