/* stand-in: everything is in ice_shim_kernel.h */
#include <ice_shim_kernel.h>
