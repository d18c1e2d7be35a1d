// Engine: the scheduler thread and the channels that connect it to request threads (DESIGN.md).
//
// HTTP threads call submit()/abort(); the scheduler thread owns the backend, the model, the KV
// pool and the radix cache, and queues each request's OutputEvents, which the output dispatcher's
// thread pushes into the request's stream once per step (output_channel.h). The inbox, the
// dispatcher's queue and the streams are the only state shared between threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "backend/backend.h"
#include "engine/output_channel.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {

// Everything needed to build an engine, as the command line gives it.
struct EngineArgs {
  std::string model_path;
  std::string tokenizer_path;        // empty: the model directory
  std::string chat_template;         // a Jinja file or template replacing the tokenizer's (empty: its own)
  std::string load_format = "auto";  // auto | safetensors | dummy
  std::string device = "auto";       // auto | cpu | cuda
  std::string dtype = "auto";        // compute dtype: auto (bf16 on cuda, fp32 on cpu) | bfloat16 | float32
  std::string kv_cache_dtype = "auto";
  std::string quantization;  // weights: "" (the checkpoint's dtype) | fp8 (e4m3 per output channel)
  std::string quantization_param_path;  // KV scales JSON (fp8_e4m3)
  int64_t max_total_tokens = 0;         // 0: from memory (GPU) or a CPU default
  double mem_fraction_static = 0.88;
  int context_length = 0;  // 0: the model's max_position_embeddings
  uint64_t seed = 0;
  int cuda_graph_max_bs = 160;  // decode steps of up to this many requests replay CUDA graphs
  bool disable_cuda_graph = false;
  std::string gemm_tuning = "auto";  // auto | all | off: which decode GEMM shapes are timed at start-up
  int tp_size = 1;  // tensor-parallel ranks, one thread each (CPU only for now)
  // Tensor parallelism across processes (CPU, Gloo): tp_size / nnodes ranks a process; node 0
  // schedules and serves, the others run its steps (run_tp_node).
  int nnodes = 1;
  int node_rank = 0;
  std::string dist_init_addr;  // HOST:PORT where node 0 meets the others
  SchedulerConfig scheduler;
};

class Engine {
 public:
  Engine(std::unique_ptr<Backend> backend, std::unique_ptr<LlamaModel> model, std::unique_ptr<KvCache> kv,
         std::unique_ptr<Tokenizer> tokenizer, const SchedulerConfig& config);
  ~Engine();

  // Starts the scheduler thread. Without start(), run_until_idle() drives the scheduler inline.
  void start();
  // Called on the scheduler thread after every step with its duration (the server's step-time
  // histogram). Set it before start(); it must be quick and must not call back into the engine.
  void set_step_observer(std::function<void(double seconds)> observer) { step_observer_ = std::move(observer); }
  // Stops accepting work; with drain, finishes what is queued and running first, else aborts it.
  void shutdown(bool drain);

  std::shared_ptr<RequestStream> submit(std::vector<int32_t> input_ids, const SamplingParams& params,
                                        std::string rid = "");
  void abort(const std::string& rid);
  // Drops the radix cache; false while requests run (as SGLang's /flush_cache).
  bool flush_cache();
  SchedulerStats stats() const;
  // Offline use (no thread): runs steps until every submitted request has finished.
  void run_until_idle();

  const ModelConfig& model_config() const { return model_->config(); }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  Backend& backend() { return *backend_; }
  LlamaModel& model() { return *model_; }
  const KvCacheConfig& kv_config() const { return kv_->config(); }
  int context_length() const { return scheduler_->config().context_length; }
  bool accepting() const { return accepting_; }

 private:
  void loop();
  void drain_inbox();  // and hands the events it caused to the dispatcher

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Tokenizer> tokenizer_;
  OutputDispatcher outputs_;  // before scheduler_: the requests' sinks point into it
  std::unique_ptr<Scheduler> scheduler_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> inbox_;  // run on the scheduler thread
  SchedulerStats stats_;                     // snapshot after each step
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> drain_{false};
  std::atomic<bool> accepting_{true};
  std::atomic<uint64_t> next_id_{0};
  std::function<void(double)> step_observer_;
};

// Builds backend, model, KV pool and tokenizer from the arguments, logging what it chose.
// What an engine is made of, for tools that drive the model without the scheduler
// (bench-one-batch, dump-logits): the backend, the model (CUDA graphs captured unless disabled),
// the KV pool and the tokenizer (null where the model has none), and the scheduler's settings.
struct EngineParts {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Tokenizer> tokenizer;
  SchedulerConfig scheduler;
};
EngineParts create_engine_parts(const EngineArgs& args);
// Node node_rank > 0 of a tensor-parallel group across processes: loads this node's ranks and runs
// node 0's steps until it stops.
void run_tp_node(const EngineArgs& args);
std::unique_ptr<Engine> create_engine(const EngineArgs& args);

}  // namespace serve8
