// A small fixed thread pool. Jobs are posted and completed under one mutex with two
// condition variables: simple enough to be obviously free of lost wake-ups, which an
// earlier lock-free spin version was not (it hung when two processes shared the cores).
// Each side spins a bounded while (kSpin) before it sleeps on its condition variable, reading
// only an atomic copy of the state it waits for, then takes the mutex as before: a decode step
// posts ~100 jobs tens of microseconds apart, and without the spin each cost two futex waits
// and two wake-ups (~20% of a 2-thread int8 decode, llama100m, Zen 5 VM). Notifying a
// condition variable nobody waits on makes no system call.
// The caller runs chunk 0 itself, so a 2-way split costs one wake-up and one notify. OpenBLAS
// is kept single-threaded (set_blas_threads): its calls split over this pool instead.
#include "npuforge/kernels/parallel.h"

#include <cblas.h>
#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace nf::kernels {
namespace {

constexpr auto kSpin = std::chrono::microseconds(200);

// Set while this thread runs a chunk of a job: a parallel_for inside it (a GEMM inside a
// parallel loop) runs inline instead of waiting for the pool it occupies.
thread_local bool t_in_job = false;

void run_chunk(const std::function<void(int)>& fn, int c) {
  struct InJob {
    InJob() { t_in_job = true; }
    ~InJob() { t_in_job = false; }  // also when fn throws
  } in_job;
  fn(c);
}

// Spins until done() or kSpin has passed, yielding the core every few microseconds: on a
// 2-core VM the two threads of a job at times share one core, and a spin that never yields
// then holds off the thread it waits for (tiny_llama int8 decode at 2 threads: 170-260
// tok/s spinning on pause alone, ~1000 yielding every 4 rounds, ~2400 at 1 thread).
template <class Done>
void spin_until(Done done) {
  const auto end = std::chrono::steady_clock::now() + kSpin;
  for (int round = 1; !done(); ++round) {
    for (int i = 0; i < 64; ++i) _mm_pause();
    if (round % 4 == 0) sched_yield();
    if (std::chrono::steady_clock::now() > end) return;
  }
}

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
      gen_.store(gen_ + 1);
    }
    work_cv_.notify_all();
    run_chunk(fn, 0);
    spin_until([&] { return pending_.load() == 0; });
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
      threads_.emplace_back([this, id, start = gen_.load()] { loop(id, start); });
    }
  }

  void loop(int id, uint64_t seen) {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      if (!stop_ && gen_ == seen) {
        l.unlock();
        spin_until([&] { return gen_.load() != seen; });
        l.lock();
      }
      work_cv_.wait(l, [&] { return stop_ || gen_ != seen; });
      if (stop_) return;
      seen = gen_;
      if (id >= chunks_) continue;
      const std::function<void(int)>* fn = fn_;
      l.unlock();
      run_chunk(*fn, id);
      l.lock();
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex call_mu_, mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::thread> threads_;
  // Written under mu_; atomic so that the spins may read them without it.
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

namespace {
std::atomic<int> g_blas_threads{0};  // 0: not set, all cores
}  // namespace

void set_blas_threads(int n) {
  g_blas_threads = resolve_threads(n);
  openblas_set_num_threads(1);
}
int blas_threads() {
  static const bool single = (openblas_set_num_threads(1), true);  // also before any set_blas_threads
  (void)single;
  return g_blas_threads ? g_blas_threads.load() : hardware_threads();
}

void parallel_for(int64_t n, int threads, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  // Whole grains a chunk: splitting 256 rows with a grain of 252 would wake a thread for 128.
  int64_t chunks = std::min<int64_t>(resolve_threads(threads), n / std::max<int64_t>(grain, 1));
  if (chunks <= 1 || t_in_job) {
    fn(0, n);
    return;
  }
  Pool::get().run(static_cast<int>(chunks), [&](int c) {
    int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    if (b < e) fn(b, e);
  });
}

}  // namespace nf::kernels
