#include <irdma_shim_kernel.h>
