// Stand-in for the CUDA runtime header on the suite's include path: under NVRTC
// the built-in declarations already cover device code, and on the host
// host_shim.h (force-included) maps the CUDA spellings. Nothing to declare.
#pragma once
#include "math_constants.h"
