/* weft's scheduler workloads W1-W3 on oneTBB's flow graph (oneTBB 2021,
 * Debian 12's libtbb-dev), for weft-bench --peers. The task bodies, the
 * buffers' roles and the models are bench/peers/workloads.h's, the ones
 * sched_w1/w2/w3 run as weft host kernels; bench/peers/peers.c checks the
 * results. Each shape is the one a TBB user would write for "a stream of
 * dependent tasks submitted one by one from a client thread":
 *
 *   W1 chain   one serial function_node; the client try_puts task k (its
 *              index) for every task, then graph::wait_for_all. A serial node
 *              runs its messages one at a time in arrival order, which is
 *              exactly the chain's ordering; nothing else is needed.
 *   W2 indep.  four serial function_nodes, one per stream, fed round-robin
 *              by try_put, then one wait_for_all: the streams run in parallel,
 *              each in order.
 *   W3 fan     a flow graph cannot take a task whose predecessors may have
 *              run already (an edge made after a node fired never delivers),
 *              so tasks cannot be added one by one. The idiomatic form is a
 *              static graph of continue_nodes with the edges the bindings
 *              imply, built once and reused: W3_BLOCK layers of FAN_WIDTH
 *              nodes; node (l, j) waits for (l-1, j) and (l-1, j+1) (the
 *              writers of its inputs: read after write) and (l-1, j-1) (the
 *              other reader of the buffer it overwrites: write after read;
 *              (l-1, j) also covers write after write). A run puts one
 *              continue_msg into each node of layer 0 and waits for all, block
 *              after block; the block's base layer says which buffer set a
 *              node reads and writes. A run that starts or ends inside a
 *              block skips the bodies outside its range (the nodes still pass
 *              their message on). This favours TBB: the client submits 8
 *              messages per block instead of 512 tasks, and pays one
 *              wait_for_all per block instead (the block size: below).
 *
 * Node policy: W1's and W2's nodes use the default, queueing: queueing_
 * lightweight (which may run a short body in the thread that puts the
 * message) measured the same CPU per task here (W1 92-97 against 90-93 ns,
 * W2 86-91 against 87-88 ns, three alternating runs each). Either way the
 * client thread runs most tasks itself inside wait_for_all: TBB's workers
 * are asleep when the burst starts, and the client drains the node's queue.
 * W3_BLOCK: 16, 64 and 256 layers measured 58-106, 57-62 and 59-64 ns of
 * CPU per task; 64 it is. */
#include "bench/peers/tbb_flow.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/version.h>

#include "bench/peers/workloads.h"

namespace flow = oneapi::tbb::flow;

struct wp_tbb {
  virtual ~wp_tbb() = default;
  virtual void run(uint64_t n) = 0;
};

namespace {

using node_policy = flow::queueing;
constexpr uint32_t W3_BLOCK = 64; /* layers per reused W3 graph */

class chain final : public wp_tbb {
public:
  explicit chain(uint64_t *const *bufs)
      : bufs_{bufs[0], bufs[1]}, node_(g_, flow::serial, [this](uint64_t k) {
          chain_step(bufs_[k % 2], bufs_[(k + 1) % 2]);
          return flow::continue_msg();
        }) {}

  void run(uint64_t n) override {
    for (uint64_t i = 0; i < n; i++) node_.try_put(next_++);
    g_.wait_for_all();
  }

private:
  uint64_t *bufs_[2];
  uint64_t next_ = 0; /* the next task's index */
  flow::graph g_;
  flow::function_node<uint64_t, flow::continue_msg, node_policy> node_;
};

class indep final : public wp_tbb {
  using node = flow::function_node<flow::continue_msg, flow::continue_msg, node_policy>;

public:
  explicit indep(uint64_t *const *bufs) {
    for (uint32_t k = 0; k < NSTREAMS; k++) {
      uint64_t *p = bufs[k];
      nodes_.push_back(std::make_unique<node>(g_, flow::serial, [p](flow::continue_msg) {
        indep_step(p);
        return flow::continue_msg();
      }));
    }
  }

  void run(uint64_t n) override {
    for (uint64_t i = 0; i < n; i++) nodes_[rr_++ % NSTREAMS]->try_put(flow::continue_msg());
    g_.wait_for_all();
  }

private:
  uint64_t rr_ = 0; /* the next task's index */
  flow::graph g_;
  std::vector<std::unique_ptr<node>> nodes_;
};

class fan final : public wp_tbb {
  using node = flow::continue_node<flow::continue_msg>;

public:
  explicit fan(uint64_t *const *bufs) {
    for (uint32_t i = 0; i < 2 * FAN_WIDTH; i++) bufs_[i] = bufs[i];
    for (uint32_t l = 0; l < W3_BLOCK; l++)
      for (uint32_t j = 0; j < FAN_WIDTH; j++)
        nodes_.push_back(std::make_unique<node>(g_, [this, l, j](const flow::continue_msg &) {
          uint32_t idx = l * FAN_WIDTH + j;
          if (idx >= first_ && idx < limit_) {
            uint32_t cur = (uint32_t)((base_ + l) % 2u) * FAN_WIDTH, prev = FAN_WIDTH - cur;
            fan_step(bufs_[prev + j], bufs_[prev + (j + 1) % FAN_WIDTH], bufs_[cur + j]);
          }
          return flow::continue_msg();
        }));
    for (uint32_t l = 1; l < W3_BLOCK; l++)
      for (uint32_t j = 0; j < FAN_WIDTH; j++)
        for (uint32_t d : {FAN_WIDTH - 1, 0u, 1u}) /* (l-1, j-1), (l-1, j), (l-1, j+1) */
          flow::make_edge(*at(l - 1, (j + d) % FAN_WIDTH), *at(l, j));
  }

  void run(uint64_t n) override {
    while (n) {
      /* a block starts at layer pos_.layer; the tasks of it before pos_.j ran already */
      uint64_t room = (uint64_t)W3_BLOCK * FAN_WIDTH - pos_.j;
      uint64_t count = n < room ? n : room;
      base_ = pos_.layer;
      first_ = pos_.j;
      limit_ = (uint32_t)(first_ + count);
      for (uint32_t j = 0; j < FAN_WIDTH; j++) at(0, j)->try_put(flow::continue_msg());
      g_.wait_for_all();
      uint64_t done = first_ + count; /* tasks of the block, counted from its layer's start */
      pos_.layer += done / FAN_WIDTH;
      pos_.j = (uint32_t)(done % FAN_WIDTH);
      n -= count;
    }
  }

private:
  node *at(uint32_t l, uint32_t j) {
    return nodes_[l * FAN_WIDTH + j].get();
  }

  uint64_t *bufs_[2 * FAN_WIDTH];
  fan_pos pos_ = {1, 0}; /* the next task: layer 0 is the initial values */
  /* The running block (written before its first message, read by its bodies). */
  uint64_t base_ = 1;
  uint32_t first_ = 0, limit_ = 0;
  flow::graph g_;
  std::vector<std::unique_ptr<node>> nodes_;
};

void set_error(char *err, size_t len, const char *what) {
  if (err && len) std::snprintf(err, len, "oneTBB: %s", what);
}

} // namespace

extern "C" wp_tbb *wp_tbb_open(wp_workload w, uint64_t *const *bufs, char *err, size_t errlen) {
  try {
    switch (w) {
    case WP_W1_CHAIN:
      return new chain(bufs);
    case WP_W2_INDEPENDENT:
      return new indep(bufs);
    case WP_W3_FAN:
      return new fan(bufs);
    }
    set_error(err, errlen, "unknown workload");
  } catch (const std::exception &e) {
    set_error(err, errlen, e.what());
  } catch (...) {
    set_error(err, errlen, "an exception that is not a std::exception");
  }
  return nullptr;
}

extern "C" int wp_tbb_run(wp_tbb *t, uint64_t n, char *err, size_t errlen) {
  try {
    t->run(n);
    return 0;
  } catch (const std::exception &e) {
    set_error(err, errlen, e.what());
  } catch (...) {
    set_error(err, errlen, "an exception that is not a std::exception");
  }
  return -1;
}

extern "C" void wp_tbb_close(wp_tbb *t) {
  delete t;
}

extern "C" const char *wp_tbb_version(void) {
  return TBB_runtime_version();
}

extern "C" int wp_tbb_concurrency(void) {
  return oneapi::tbb::info::default_concurrency();
}
