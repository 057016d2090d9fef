/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* rw area shim: everything is in rw_shim_kernel.h */
#include "rw_shim_kernel.h"
