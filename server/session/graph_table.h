// One tenant's CUDA graphs: the stream captures it has open, the graphs they (or explicit
// construction) produced, and the executable graphs instantiated from them, by the client's ids.
// Like streams, ids are chosen by the client and private to the tenant: a tenant can name only
// its own graphs. Admission, counting and the capture records need no driver and are
// unit-tested; listing nodes, invalidating by a stream's capture id, ending captures and
// destroying everything at the end of the tenancy are the driver edges.
#pragma once

#include "server/session/count_limit.h"

#include <cuda.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

class StreamTable;

// A capture the tenant began on one of its streams (the origin; streams that joined it through
// an event are the driver's to know). tallyd captures in relaxed mode: see graph_api.cc.
struct CaptureState {
  gpu::Gpu* gpu = nullptr;
  CUstream stream = nullptr;   // the origin stream's CUstream
  uint64_t captureId = 0;      // the driver's id of the capture sequence
  // A call that is illegal during capture was refused (or had to be): the capture ends with
  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as natively.
  bool invalidated = false;
};

struct GraphState {
  gpu::Gpu* gpu = nullptr;
  CUgraph graph = nullptr;
  // Node id i + 1 is nodes[i]: cuGraphGetNodes' order, listed on first use, then added nodes;
  // nullptr once destroyed (ids are never reused). A clone's nodes keep their originals' ids.
  std::vector<CUgraphNode> nodes;
  bool nodesListed = false;
  // Host nodes (ids): batch memory-operation nodes to the driver, whose words every launch sets.
  std::set<uint32_t> hostNodes;
};

struct GraphExecState {
  gpu::Gpu* gpu = nullptr;
  CUgraphExec exec = nullptr;
  uint64_t graph = 0;  // the client's id of the graph it was instantiated from (node ids refer to it)
  // Its host nodes: id and the graph's node, as at instantiation (the graph may change later).
  std::map<uint32_t, CUgraphNode> hostNodes;
};

class GraphTable {
 public:
  // `maxGraphs` bounds graphs and executable graphs, each (0 = unlimited).
  GraphTable(StreamTable& streams, uint64_t maxGraphs, std::string tenant);

  // --- captures (keyed by the origin stream's id) -----------------------------------------
  CaptureState* capture(uint64_t stream);
  void addCapture(uint64_t stream, CaptureState c);
  std::optional<CaptureState> takeCapture(uint64_t stream);
  size_t captureCount() const { return captures_.size(); }
  // Marks the capture with this driver id invalidated; false if it is not one of this tenant's.
  bool invalidateCapture(uint64_t captureId);
  // The same for the capture `stream` takes part in (the origin or a stream that joined it).
  bool invalidateCaptureOf(CUstream stream);

  // --- graphs ---------------------------------------------------------------------------
  // CUDA_ERROR_INVALID_VALUE for an id in use or 0; CUDA_ERROR_OUT_OF_MEMORY past the limit.
  CUresult admitGraph(uint64_t id);
  void insertGraph(uint64_t id, GraphState g);
  GraphState* graph(uint64_t id);
  std::optional<GraphState> takeGraph(uint64_t id);
  size_t graphCount() const { return graphs_.size(); }
  // Node `id` (1-based) of `g`, listing the graph's nodes on first use; nullptr if there is none.
  CUgraphNode node(GraphState& g, uint32_t id);
  // Lists `g`'s nodes from the driver once (a captured graph); CUDA_SUCCESS if already done.
  CUresult listNodes(GraphState& g);
  // Two zeroed u32 words of device memory on `g`'s GPU that a host node names until its first
  // launch sets its own (a wait there passes at once); nullopt if they cannot be allocated.
  std::optional<CUdeviceptr> placeholderWords(gpu::Gpu* g);

  // --- executable graphs -----------------------------------------------------------------
  CUresult admitExec(uint64_t id);
  // Whether an executable graph with host nodes was instantiated from graph `id`: each launch
  // sets its host nodes' words through that graph's nodes, so they must outlive the graph's
  // handle (retireGraph) and may not be destroyed one by one.
  bool hostNodesInUse(uint64_t graph) const;
  // Keeps the destroyed graph `id` for its executable graphs with host nodes; it goes when the
  // last of them does (takeExec).
  void retireGraph(uint64_t id, GraphState g);
  void insertExec(uint64_t id, GraphExecState e);
  GraphExecState* exec(uint64_t id);
  std::optional<GraphExecState> takeExec(uint64_t id);
  size_t execCount() const { return execs_.size(); }

  // --- end of the tenancy, in the order Tenant::release() calls them ----------------------
  // Ends the captures still open (their graphs are destroyed): before the streams are
  // synchronized, which a capturing stream refuses.
  void endCaptures();
  // Destroys the executable graphs, then the graphs: after the streams are synchronized (no
  // launch of them is still running) and before the modules go (their nodes name functions).
  void destroyAll();

 private:
  StreamTable& streams_;
  std::string tenant_;
  CountLimit graphLimit_;
  CountLimit execLimit_;
  std::unordered_map<uint64_t, CaptureState> captures_;
  std::unordered_map<uint64_t, GraphState> graphs_;
  std::unordered_map<uint64_t, GraphExecState> execs_;
  std::map<gpu::Gpu*, CUdeviceptr> placeholderWords_;
  std::unordered_map<uint64_t, GraphState> retired_;  // destroyed by the tenant, kept for its execs
};

}  // namespace tally::server::session
