/* The C ABI shared by every deploykit plugin library: export macro, status codes, dtypes.
 *
 * Kept C-compatible so that Python can call the kernels through ctypes and so that the CPU library
 * never depends on CUDA or TensorRT. Sizes are int64_t, pointers are row-major contiguous buffers.
 */
#ifndef DEPLOYKIT_PLUGINS_ABI_H
#define DEPLOYKIT_PLUGINS_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef DEPLOYKIT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

/* Libraries are built with hidden visibility; only what carries this macro is exported. */
#define DEPLOYKIT_API __attribute__((visibility("default")))

/* Bump when a signature or a dims struct below (or in an op header) changes. */
#define DEPLOYKIT_PLUGINS_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* Return values of the CPU entry points. On error the output buffer is left untouched and `err`
 * holds a NUL-terminated message naming the tensor and the offending index. */
enum deploykit_status {
    DEPLOYKIT_OK = 0,
    DEPLOYKIT_ERR_ARGUMENT = 1, /* a size is negative or a required pointer is NULL */
    DEPLOYKIT_ERR_INDEX = 2     /* an index, interval or coordinate lies outside its tensor or grid */
};

/* Element type of the floating-point tensors of a CUDA launch (the CPU kernels take float32). */
typedef enum deploykit_dtype { DEPLOYKIT_FLOAT32 = 0, DEPLOYKIT_FLOAT16 = 1 } deploykit_dtype;

/* DEPLOYKIT_PLUGINS_ABI_VERSION of the library, so a caller can refuse a stale build. */
DEPLOYKIT_API int32_t deploykit_plugins_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* DEPLOYKIT_PLUGINS_ABI_H */
