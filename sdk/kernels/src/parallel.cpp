// A small fixed thread pool. Workers spin briefly for the next job, then sleep on a
// condition variable: decode issues many short GEMVs back to back, and a machine shared
// with other work must not lose whole scheduler ticks to spinning threads (OpenMP's
// default active wait cost ~30x on an oversubscribed box).
#include "npuforge/kernels/parallel.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace nf::kernels {
namespace {

class Pool {
 public:
  static Pool& get() {
    static Pool pool;
    return pool;
  }

  // Runs fn(c) for c in [0, chunks): chunk 0 on the calling thread, others on workers.
  void run(int chunks, const std::function<void(int)>& fn) {
    std::lock_guard<std::mutex> call(call_mu_);  // one job at a time
    grow(chunks - 1);
    fn_ = &fn;
    chunks_ = chunks;
    pending_.store(chunks - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> l(mu_);
      gen_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    fn(0);
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin < kSpin) _mm_pause();
      else std::this_thread::yield();
    }
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      gen_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  static constexpr int kSpin = 200;

  void grow(int workers) {
    while (static_cast<int>(threads_.size()) < workers) {
      // The worker starts from the current generation: the job about to be posted is new to it.
      int id = static_cast<int>(threads_.size()) + 1;
      uint64_t start = gen_.load(std::memory_order_acquire);
      threads_.emplace_back([this, id, start] { loop(id, start); });
    }
  }

  void loop(int id, uint64_t seen) {
    for (;;) {
      for (int i = 0; i < kSpin && gen_.load(std::memory_order_acquire) == seen; ++i) _mm_pause();
      if (gen_.load(std::memory_order_acquire) == seen) {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return gen_.load(std::memory_order_acquire) != seen; });
      }
      seen = gen_.load(std::memory_order_acquire);
      if (stop_) return;
      if (id < chunks_) {
        (*fn_)(id);
        pending_.fetch_sub(1, std::memory_order_release);
      }
    }
  }

  std::mutex call_mu_, mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int)>* fn_ = nullptr;
  int chunks_ = 0;
  bool stop_ = false;
};

}  // namespace

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

int resolve_threads(int requested) { return requested > 0 ? requested : hardware_threads(); }

void set_blas_threads(int n) { openblas_set_num_threads(resolve_threads(n)); }

void parallel_for(int64_t n, int threads, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int64_t chunks = std::min<int64_t>(resolve_threads(threads), (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  Pool::get().run(static_cast<int>(chunks), [&](int c) {
    int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    if (b < e) fn(b, e);
  });
}

}  // namespace nf::kernels
