#include "common/abi.h"

extern "C" int32_t deploykit_plugins_abi_version(void)
{
    return DEPLOYKIT_PLUGINS_ABI_VERSION;
}
