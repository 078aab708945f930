// The "sim" backend: loads the simulator plugin (libtessera_sim_plugin.so) and takes its backend table.
#include "Device.h"
#include "Error.h"

namespace tessera::runtime {

tessera_status loadSimBackend(std::unique_ptr<SharedLibrary> &plugin, const tessera_backend *&backend) {
  SharedLibrary::Search search{"sim backend plugin", "TESSERA_SIM_PLUGIN",
                               {runtimeLibraryDir() + "/libtessera_sim_plugin.so"}};
  if (tessera_status s = SharedLibrary::open(search, plugin))
    return s;
  tessera_backend_plugin_fn entry = nullptr;
  if (tessera_status s = plugin->resolve(TESSERA_BACKEND_PLUGIN_SYMBOL, entry))
    return s;
  backend = entry(TESSERA_BACKEND_ABI_VERSION);
  if (!backend || backend->abi_version != TESSERA_BACKEND_ABI_VERSION)
    return fail(TESSERA_ERROR_BACKEND_UNAVAILABLE,
                plugin->path() + " does not provide backend ABI version " + std::to_string(TESSERA_BACKEND_ABI_VERSION));
  if (!backend->memset_async)
    return fail(TESSERA_ERROR_BACKEND_UNAVAILABLE, plugin->path() + " has no memset_async (backend ABI 3 requires it)");
  return TESSERA_SUCCESS;
}

} // namespace tessera::runtime
