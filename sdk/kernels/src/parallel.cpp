// A small fixed thread pool. Jobs are posted and completed under one mutex with two
// condition variables: simple enough to be obviously free of lost wake-ups, which an
// earlier lock-free spin version was not (it hung when two processes shared the cores).
// The caller runs chunk 0 itself, so a 2-way split costs one wake-up and one notify.
#include "npuforge/kernels/parallel.h"

#include <cblas.h>

#include <algorithm>
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
    {
      std::lock_guard<std::mutex> l(mu_);
      grow(chunks - 1);
      fn_ = &fn;
      chunks_ = chunks;
      pending_ = chunks - 1;
      ++gen_;
    }
    work_cv_.notify_all();
    fn(0);
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return pending_ == 0; });
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  // Called with mu_ held: a new worker starts at the current generation, so the job
  // about to be posted is new to it.
  void grow(int workers) {
    while (static_cast<int>(threads_.size()) < workers) {
      int id = static_cast<int>(threads_.size()) + 1;
      threads_.emplace_back([this, id, start = gen_] { loop(id, start); });
    }
  }

  void loop(int id, uint64_t seen) {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      work_cv_.wait(l, [&] { return stop_ || gen_ != seen; });
      if (stop_) return;
      seen = gen_;
      if (id >= chunks_) continue;
      const std::function<void(int)>* fn = fn_;
      l.unlock();
      (*fn)(id);
      l.lock();
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex call_mu_, mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::thread> threads_;
  uint64_t gen_ = 0;
  int pending_ = 0;
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
