// Error reporting for the CPU kernels' C ABI (internal to the CPU library).
#pragma once

#include <cstdarg>
#include <cstdio>
#include <initializer_list>

#include "common/abi.h"

namespace deploykit
{

// Writes the printf-style message into the caller's buffer (truncated, always NUL-terminated
// when there is room) and returns `status`, so a check reads `return fail(...)`.
__attribute__((format(printf, 4, 5))) inline int32_t fail(
    char* err, size_t errLen, int32_t status, char const* format, ...)
{
    if (err != nullptr && errLen > 0)
    {
        va_list args;
        va_start(args, format);
        std::vsnprintf(err, errLen, format, args);
        va_end(args);
    }
    return status;
}

struct Size
{
    char const* name;
    int64_t value;
};

// Every size must be >= 0.
inline int32_t checkSizes(char const* op, std::initializer_list<Size> sizes, char* err, size_t errLen)
{
    for (Size const& size : sizes)
    {
        if (size.value < 0)
        {
            return fail(err, errLen, DEPLOYKIT_ERR_ARGUMENT, "%s: size %s = %lld is negative", op, size.name,
                static_cast<long long>(size.value));
        }
    }
    return DEPLOYKIT_OK;
}

struct Buffer
{
    char const* name;
    void const* pointer;
    int64_t count;
};

// A tensor with elements must come with a buffer; an empty one may be NULL.
inline int32_t checkBuffers(char const* op, std::initializer_list<Buffer> buffers, char* err, size_t errLen)
{
    for (Buffer const& buffer : buffers)
    {
        if (buffer.pointer == nullptr && buffer.count > 0)
        {
            return fail(err, errLen, DEPLOYKIT_ERR_ARGUMENT, "%s: %s is NULL but has %lld elements", op, buffer.name,
                static_cast<long long>(buffer.count));
        }
    }
    return DEPLOYKIT_OK;
}

} // namespace deploykit
