// Context-local storage: values a CUDA runtime linked into the application keeps per context in
// the driver (served through cuGetExportTable, client/api/export_tables.cc). Keyed by context and
// an opaque key (one per runtime copy in the process); a null context means the calling thread's
// current one. When a context ends (destroyed, or a primary context reset) its values' destructors
// run, so the runtime builds its state anew on the next use, as it does natively.
#pragma once

#include <cuda.h>

namespace tally::client::context_storage {

using Destructor = void (*)(CUcontext ctx, void* key, void* value);

// The three slots of the table, in the runtime's argument order.
CUresult put(CUcontext ctx, void* key, void* value, Destructor destructor);
CUresult remove(CUcontext ctx, void* key);  // no destructor runs
CUresult get(void** value, CUcontext ctx, void* key);

// Runs the destructors of `ctx`'s values (outside any lock: they may call the driver) and forgets them.
void release(CUcontext ctx);

}  // namespace tally::client::context_storage
