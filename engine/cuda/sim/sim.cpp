// sim.cpp — the CUDA simulator's scheduler: fibers for the threads of a block, the random
// order between sync points, barrier and warp-collective resolution with participation
// checks, shared memory with poison, launch checks and seeds. See sim.h for the model.
#include "sim.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <vector>

#if !defined(__x86_64__) || defined(PTD_CUDA_SIM_UCONTEXT)
#include <ucontext.h>
#endif

namespace ptd::cuda::sim {

// ---- fibers -----------------------------------------------------------------------------
// x86-64: a hand-written switch (callee-saved registers, MXCSR and the x87 control word);
// ~10 ns, against ~1 µs for swapcontext's signal-mask system call. Elsewhere (or with
// PTD_CUDA_SIM_UCONTEXT defined, to test that path): ucontext.
#if defined(__x86_64__) && !defined(PTD_CUDA_SIM_UCONTEXT)
#define PTD_SIM_ASM_SWITCH 1
#endif
#if defined(PTD_SIM_ASM_SWITCH)
extern "C" void ptd_sim_switch(void** save_sp, void* load_sp);
extern "C" void ptd_sim_fiber_start();
asm(R"(
.text
.globl ptd_sim_switch
.type ptd_sim_switch,@function
ptd_sim_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size ptd_sim_switch,.-ptd_sim_switch
.globl ptd_sim_fiber_start
.type ptd_sim_fiber_start,@function
ptd_sim_fiber_start:
    andq $-16, %rsp
    call ptd_sim_fiber_main
    ud2
.size ptd_sim_fiber_start,.-ptd_sim_fiber_start
.section .note.GNU-stack,"",@progbits
.text
)");
#endif

namespace {
enum class Wait : uint8_t { runnable, barrier, warp, exited };
}  // namespace

struct ThreadState {
    uint3 idx{};
    int rank = 0;  // linear index in the block
    Wait wait = Wait::runnable;
    // the sync point it waits at
    const char* file = nullptr;
    int line = 0;
    WarpOp op = WarpOp::sync;
    unsigned mask = 0;
    int arg = 0, width = 32, value_bytes = 0;
    uint64_t value = 0, result = 0;
    // its fiber
    char* stack_lo = nullptr;
#if defined(PTD_SIM_ASM_SWITCH)
    void* sp = nullptr;
#else
    ucontext_t context;
#endif
};

struct SharedEntry {
    const void* site;
    size_t bytes;
    void* ptr;
};

struct BlockState {
    uint3 block_idx{};
    dim3 block_dim, grid_dim;
    const LaunchConfig* config = nullptr;
    void (*body)(void*) = nullptr;
    void* body_state = nullptr;
    uint64_t seed = 0, launch_index = 0;
    std::vector<ThreadState> threads;
    std::vector<SharedEntry> shared;
    size_t static_used = 0;
    std::byte* static_arena = nullptr;
    std::byte* dynamic = nullptr;
#if defined(PTD_SIM_ASM_SWITCH)
    void* scheduler_sp = nullptr;
#else
    ucontext_t scheduler_context;
#endif
};

namespace detail {
thread_local constinit ThreadState* tl_thread = nullptr;
thread_local constinit BlockState* tl_block = nullptr;
}  // namespace detail
using detail::tl_block;
using detail::tl_thread;

namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;
constexpr int kResidentBlocks = 4;  // the racecheck's interleaved order: blocks alive at once

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
struct Rng {
    uint64_t state;
    uint64_t next() { return state = splitmix64(state); }
    uint32_t below(uint32_t n) { return (uint32_t)(((next() >> 32) * (uint64_t)n) >> 32); }
};

// Per OS thread: reusable fiber stacks and the block being run, so separate host threads
// may run launches at the same time.
struct Simulator {
    std::vector<char*> stacks;  // each kGuardBytes + kStackBytes, guard page at the low end
    // Slot 0 runs the blocks one after another; the racecheck's interleaved order keeps up to
    // kResidentBlocks blocks resident, each with its own threads' stacks and shared memory.
    std::vector<BlockState> blocks;
    std::vector<std::vector<std::byte>> static_arena_storage, dynamic_storage;
    uint64_t launches = 0, last_seed = 0;
    ~Simulator() {
        for (char* s : stacks) munmap(s, kGuardBytes + kStackBytes);
    }
    void ensure_stacks(size_t n) {
        while (stacks.size() < n) {
            void* p = mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) {
                std::fprintf(stderr, "ptd cuda-sim: cannot map a %zu KiB fiber stack\n", kStackBytes / 1024);
                std::abort();
            }
            mprotect(p, kGuardBytes, PROT_NONE);
            stacks.push_back(static_cast<char*>(p));
        }
    }
};
thread_local Simulator tl_sim;

std::atomic<uint64_t> g_base_seed{0};
std::atomic<bool> g_base_seed_set{false};
std::mutex g_attr_mutex;
std::unordered_map<const void*, size_t>& max_dynamic_smem_table() {
    static std::unordered_map<const void*, size_t> table;
    return table;
}

std::string dims(dim3 d) { return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")"; }
std::string dims(uint3 d) { return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")"; }
std::string site(const char* file, int line) { return std::string(file ? file : "?") + ":" + std::to_string(line); }
bool same_site(const ThreadState& a, const ThreadState& b) {
    return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}
const char* op_name(WarpOp op) {
    switch (op) {
        case WarpOp::sync: return "__syncwarp";
        case WarpOp::shfl_idx: return "__shfl_sync";
        case WarpOp::shfl_xor: return "__shfl_xor_sync";
        case WarpOp::shfl_down: return "__shfl_down_sync";
        case WarpOp::shfl_up: return "__shfl_up_sync";
        case WarpOp::ballot: return "__ballot_sync";
        case WarpOp::any: return "__any_sync";
        case WarpOp::all: return "__all_sync";
    }
    return "?";
}
std::string describe(const ThreadState& t) {
    std::string s = "thread " + dims(t.idx) + " ";
    switch (t.wait) {
        case Wait::runnable: return s + "is running";
        case Wait::exited: return s + "has exited";
        case Wait::barrier: return s + "waits at __syncthreads at " + site(t.file, t.line);
        case Wait::warp: return s + "waits at " + op_name(t.op) + " at " + site(t.file, t.line);
    }
    return s;
}

// Aborts with the launch, the block and how to replay the launch's thread order.
[[noreturn]] void fail(const std::string& what) {
    const BlockState* b = tl_block;
    if (b && b->config) {
        const LaunchConfig& c = *b->config;
        std::fprintf(stderr,
                     "ptd cuda-sim: %s launched at %s, grid %s block %s, in block %s:\n  %s\n"
                     "  launch #%" PRIu64 " of this host thread, seed 0x%016" PRIx64
                     " (replay: PTD_CUDA_SIM_SEED=%" PRIu64 ")\n",
                     c.kernel_name, site(c.file, c.line).c_str(), dims(c.grid).c_str(), dims(c.block).c_str(),
                     dims(b->block_idx).c_str(), what.c_str(), b->launch_index, tl_sim.last_seed, base_seed());
    } else {
        std::fprintf(stderr, "ptd cuda-sim: %s\n", what.c_str());
    }
    std::fflush(stderr);
    std::abort();
}

ThreadState& current_thread(const char* what) {
    if (!tl_thread) fail(std::string(what) + " called outside a kernel");
    return *tl_thread;
}

void switch_to_thread(BlockState& b, ThreadState& t) {
    tl_thread = &t;
#if defined(PTD_SIM_ASM_SWITCH)
    ptd_sim_switch(&b.scheduler_sp, t.sp);
#else
    swapcontext(&b.scheduler_context, &t.context);
#endif
    tl_thread = nullptr;
}
void yield_to_scheduler(ThreadState& t) {
    BlockState& b = *tl_block;
#if defined(PTD_SIM_ASM_SWITCH)
    ptd_sim_switch(&t.sp, b.scheduler_sp);
#else
    swapcontext(&t.context, &b.scheduler_context);
#endif
}

}  // namespace

extern "C" void ptd_sim_fiber_main() {
    BlockState& b = *tl_block;
    try {
        b.body(b.body_state);
    } catch (const std::exception& e) {
        fail(std::string("the kernel threw an exception: ") + e.what());
    } catch (...) {
        fail("the kernel threw an exception");
    }
    ThreadState& t = *tl_thread;
    t.wait = Wait::exited;
    yield_to_scheduler(t);
    std::abort();  // an exited fiber is never resumed
}

namespace {

void init_fiber(BlockState& b, ThreadState& t) {
    char* top = t.stack_lo + kStackBytes;
#if defined(PTD_SIM_ASM_SWITCH)
    // The frame ptd_sim_switch pops: CSR slot, r15, r14, r13, r12, rbx, rbp, return address.
    auto* sp = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(top) & ~uintptr_t{15});
    *--sp = 0;  // padding (keeps the frame 16-byte aligned)
    *--sp = reinterpret_cast<uint64_t>(&ptd_sim_fiber_start);
    for (int i = 0; i < 6; ++i) *--sp = 0;
    *--sp = 0x1f80ull | (0x037full << 32);  // default MXCSR, default x87 control word
    t.sp = sp;
#else
    getcontext(&t.context);
    t.context.uc_stack.ss_sp = t.stack_lo;
    t.context.uc_stack.ss_size = kStackBytes;
    t.context.uc_link = nullptr;
    makecontext(&t.context, reinterpret_cast<void (*)()>(&ptd_sim_fiber_main), 0);
#endif
    (void)b;
}

uint64_t poison_bits(int bytes) { return bytes >= 8 ? ~0ull : ((1ull << (8 * bytes)) - 1); }

// Every existing lane of warp w waits at a warp op (else: a participation error). Computes
// each lane's result.
void resolve_warp(BlockState& b, int first, int count) {
    ThreadState* lanes = &b.threads[first];
    const ThreadState& lead = lanes[0];
    const unsigned existing = count == 32 ? 0xffffffffu : ((1u << count) - 1);
    for (int l = 0; l < count; ++l) {
        const ThreadState& t = lanes[l];
        if (t.wait != Wait::warp || !same_site(t, lead) || t.op != lead.op)
            fail(std::string("warp ") + std::to_string(first / 32) + ": not every lane reached the same warp collective — " +
                 describe(lead) + ", but " + describe(t) + " (divergent warp collective)");
        if (t.mask != lead.mask || t.width != lead.width)
            fail("warp " + std::to_string(first / 32) + ": lanes pass different masks or widths to " + op_name(t.op) +
                 " at " + site(t.file, t.line));
    }
    if ((lead.mask & existing) != existing) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s at %s: mask 0x%08x leaves out lanes that exist (0x%08x); the simulator "
                      "supports only full-warp collectives", op_name(lead.op), site(lead.file, lead.line).c_str(), lead.mask,
                      existing);
        fail(buf);
    }
    const int width = lead.width;
    if (width < 1 || width > 32 || (width & (width - 1)) != 0)
        fail(std::string(op_name(lead.op)) + " at " + site(lead.file, lead.line) + ": width " + std::to_string(width) +
             " is not a power of two in [1, 32]");
    unsigned ballot = 0;
    for (int l = 0; l < count; ++l)
        if (lanes[l].value != 0) ballot |= 1u << l;
    for (int l = 0; l < count; ++l) {
        ThreadState& t = lanes[l];
        const int seg_start = l & ~(width - 1), seg_end = seg_start + width - 1;
        int src = l;
        switch (t.op) {
            case WarpOp::sync: t.result = 0; break;
            case WarpOp::ballot: t.result = ballot; break;
            case WarpOp::any: t.result = ballot != 0; break;
            case WarpOp::all: t.result = ballot == existing; break;
            case WarpOp::shfl_idx: src = seg_start + (t.arg & (width - 1)); break;
            case WarpOp::shfl_xor: src = l ^ t.arg; if (src > seg_end || src < 0) src = l; break;
            case WarpOp::shfl_down: src = l + t.arg; if (src > seg_end) src = l; break;
            case WarpOp::shfl_up: src = l - t.arg; if (src < seg_start) src = l; break;
        }
        if (t.op == WarpOp::shfl_idx || t.op == WarpOp::shfl_xor || t.op == WarpOp::shfl_down ||
            t.op == WarpOp::shfl_up) {
            // A lane beyond the block's threads does not exist: its value is poison.
            t.result = (src >= 0 && src < count) ? lanes[src].value : poison_bits(t.value_bytes);
        }
    }
    for (int l = 0; l < count; ++l) lanes[l].wait = Wait::runnable;
}

// The threads of a block between two barriers (a "stretch") run warp by warp: a pick takes
// one warp and runs each of its runnable lanes, in a random order, until that lane reaches its
// next sync point; a warp whose lanes all wait at the same warp collective is resolved at once
// and can be picked again, so warps drift apart as on the GPU. Which warp goes next follows
// one of two policies, drawn per stretch: a random priority order (one warp runs all the way
// to the barrier before the next starts — the largest drift) or a uniform random choice.
// A BlockRun runs one stretch at a time, so the racecheck's interleaved order can alternate
// the stretches of several resident blocks; run_block runs them back to back.
class BlockRun {
public:
    explicit BlockRun(BlockState& b) : b_(b), n_((int)b.threads.size()), warps_((n_ + 31) / 32), rng_{b.seed} {
        for (int i = 0; i < n_; ++i) {
            ThreadState& t = b.threads[i];
            t.wait = Wait::runnable;
            init_fiber(b, t);
        }
        b.shared.clear();
        b.static_used = 0;
        ws_.resize(warps_);
        priority_.resize(warps_);
        candidates_.reserve(warps_);
        release_all();
        by_priority_ = rng_.next() & 1;
    }
    // Runs every thread of the block to its next barrier or its end; true when every thread
    // has exited.
    bool run_stretch() {
        tl_block = &b_;
        for (;;) {
            int pick = -1;
            if (by_priority_) {
                for (int w : priority_)
                    if (ws_[w].runnable > 0) {
                        pick = w;
                        break;
                    }
            } else {
                candidates_.clear();
                for (int w = 0; w < warps_; ++w)
                    if (ws_[w].runnable > 0) candidates_.push_back(w);
                if (!candidates_.empty()) pick = candidates_[rng_.below((uint32_t)candidates_.size())];
            }
            if (pick < 0) break;
            Warp& wp = ws_[pick];
            uint8_t order[32];
            const int count = wp.runnable;
            std::memcpy(order, wp.lanes, (size_t)count);
            for (int i = count - 1; i > 0; --i) std::swap(order[i], order[rng_.below((uint32_t)i + 1)]);
            wp.runnable = 0;
            for (int i = 0; i < count; ++i) {
                ThreadState& t = b_.threads[wp.first + order[i]];
                switch_to_thread(b_, t);
                if (t.wait == Wait::warp)
                    ++wp.waiting;
                else
                    ++wp.done;
            }
            if (wp.waiting > 0 && wp.waiting + wp.done == wp.count) {
                resolve_warp(b_, wp.first, wp.count);  // fails unless every lane waits at the same op
                wp.waiting = 0;
                wp.runnable = wp.count;
                for (int l = 0; l < wp.count; ++l) wp.lanes[l] = (uint8_t)l;
            }
        }
        // No thread can run: every thread waits at a barrier or has exited.
        const ThreadState* waiting = nullptr;
        const ThreadState* gone = nullptr;
        for (const ThreadState& t : b_.threads) {
            if (t.wait == Wait::barrier) {
                if (waiting && !same_site(*waiting, t))
                    fail("threads wait at different __syncthreads (divergent barrier): " + describe(*waiting) + ", " +
                         describe(t));
                if (!waiting) waiting = &t;
            } else if (!gone) {
                gone = &t;
            }
        }
        if (!waiting) return true;  // every thread has exited
        if (gone)
            fail("__syncthreads in divergent code: " + describe(*waiting) + ", but " + describe(*gone) +
                 " (every thread of the block must reach the same barrier)");
        for (ThreadState& t : b_.threads) t.wait = Wait::runnable;
        release_all();
        by_priority_ = rng_.next() & 1;
        return false;
    }

private:
    struct Warp {
        int first, count, runnable, waiting, done;  // done: at the barrier or exited
        uint8_t lanes[32];
    };
    void release_all() {
        for (int w = 0; w < warps_; ++w) {
            Warp& wp = ws_[w];
            wp.first = w * 32;
            wp.count = std::min(32, n_ - wp.first);
            wp.runnable = wp.count;
            wp.waiting = wp.done = 0;
            for (int l = 0; l < wp.count; ++l) wp.lanes[l] = (uint8_t)l;
            priority_[w] = w;
        }
        for (int w = warps_ - 1; w > 0; --w) std::swap(priority_[w], priority_[rng_.below((uint32_t)w + 1)]);
    }
    BlockState& b_;
    int n_, warps_;
    Rng rng_;
    std::vector<Warp> ws_;
    std::vector<int> priority_, candidates_;
    bool by_priority_ = false;
};

void run_block(BlockState& b) {
    BlockRun run(b);
    while (!run.run_stretch()) {
    }
}

// ---- memcheck's fault handler -------------------------------------------------------------
// Under memcheck (runtime.h) a load or store outside a device allocation hits a PROT_NONE
// guard page. The handler runs on an alternate stack (a fiber whose own stack overflowed can
// still be named), prints what the simulator knows — the kernel, its launch site, the block
// and thread running now, read or write, the address and the nearest allocation — and
// returns with the default action restored, so the access faults again and the process dies
// of SIGSEGV as it would without the handler.
void memcheck_fault(int, siginfo_t* info, void* context) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
    const char* access = "access";
#if defined(__x86_64__) && defined(REG_ERR)
    const auto* uc = static_cast<const ucontext_t*>(context);
    access = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? "write" : "read";  // page-fault error code bit 1: a write
#else
    (void)context;
#endif
    char where[512];
    sim_describe_address(addr, where, sizeof where);
    const ThreadState* t = tl_thread;
    const BlockState* b = tl_block;
    if (t && addr >= reinterpret_cast<uintptr_t>(t->stack_lo) - kGuardBytes &&
        addr < reinterpret_cast<uintptr_t>(t->stack_lo))
        std::snprintf(where, sizeof where, "address %#" PRIxPTR " is in the guard page below the thread's %zu KiB stack "
                      "(a stack overflow: large local arrays or deep recursion)", addr, kStackBytes / 1024);
    if (t && b && b->config) {
        const LaunchConfig& c = *b->config;
        std::fprintf(stderr,
                     "ptd cuda-sim memcheck: invalid %s by %s launched at %s, grid %s block %s, in block %s thread %s:\n"
                     "  %s\n  launch #%" PRIu64 " of this host thread, seed 0x%016" PRIx64
                     " (replay: PTD_CUDA_SIM_SEED=%" PRIu64 ")\n",
                     access, c.kernel_name, site(c.file, c.line).c_str(), dims(c.grid).c_str(), dims(c.block).c_str(),
                     dims(b->block_idx).c_str(), dims(t->idx).c_str(), where, b->launch_index, tl_sim.last_seed,
                     base_seed());
    } else {
        std::fprintf(stderr, "ptd cuda-sim memcheck: invalid %s outside any kernel (host code: the cuBLASLt "
                     "reference, a copy):\n  %s\n", access, where);
    }
    std::fflush(stderr);
    signal(SIGSEGV, SIG_DFL);
}

}  // namespace

void sim_memcheck_install_handler() {
    static std::once_flag installed;
    std::call_once(installed, [] {
        struct sigaction sa {};
        sa.sa_sigaction = memcheck_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, nullptr);
    });
    // The alternate stack is per OS thread; it is never freed (the thread may fault any time).
    thread_local bool has_alt_stack = false;
    if (!has_alt_stack) {
        stack_t ss{};
        ss.ss_size = 64 * 1024;
        ss.ss_sp = std::malloc(ss.ss_size);
        if (ss.ss_sp) sigaltstack(&ss, nullptr);
        has_alt_stack = true;
    }
}

namespace {

uint64_t read_env_seed() {
    const char* env = std::getenv("PTD_CUDA_SIM_SEED");
    if (!env || !*env) return 1;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(env, &end, 0);
    if (errno != 0 || *end != '\0' || env[0] == '-') {
        std::fprintf(stderr,
                     "ptd cuda-sim: environment variable PTD_CUDA_SIM_SEED='%s' is not an unsigned 64-bit integer "
                     "(decimal or 0x hex)\n",
                     env);
        std::exit(2);
    }
    return v;
}

}  // namespace

// ---- public API ------------------------------------------------------------------------
namespace detail {
const uint3& thread_idx() { return current_thread("threadIdx").idx; }
const uint3& block_idx() {
    if (!tl_block) fail("blockIdx used outside a kernel");
    return tl_block->block_idx;
}
const dim3& block_dim() {
    if (!tl_block) fail("blockDim used outside a kernel");
    return tl_block->block_dim;
}
const dim3& grid_dim() {
    if (!tl_block) fail("gridDim used outside a kernel");
    return tl_block->grid_dim;
}
}  // namespace detail

void syncthreads(const char* file, int line) {
    ThreadState& t = current_thread("__syncthreads");
    t.wait = Wait::barrier;
    t.file = file;
    t.line = line;
    yield_to_scheduler(t);
}

uint64_t warp_collective(const char* file, int line, WarpOp op, unsigned mask, uint64_t value, int arg, int width,
                         int value_bytes) {
    ThreadState& t = current_thread(op_name(op));
    t.wait = Wait::warp;
    t.file = file;
    t.line = line;
    t.op = op;
    t.mask = mask;
    t.value = value;
    t.arg = arg;
    t.width = width;
    t.value_bytes = value_bytes;
    yield_to_scheduler(t);
    return t.result;
}

void* static_shared(const void* site_key, size_t bytes, size_t align, const char* name, const char* file, int line) {
    current_thread("PTD_SHARED");
    BlockState& b = *tl_block;
    for (const SharedEntry& e : b.shared)
        if (e.site == site_key) {
            if (e.bytes != bytes)
                fail("PTD_SHARED " + std::string(name) + " at " + site(file, line) + " asks for " + std::to_string(bytes) +
                     " bytes, another thread of the block for " + std::to_string(e.bytes));
            return e.ptr;
        }
    const size_t offset = (b.static_used + align - 1) / align * align;
    const DeviceLimits& lim = device_limits();
    if (offset + bytes > lim.static_smem_per_block)
        fail("PTD_SHARED " + std::string(name) + " (" + std::to_string(bytes) + " bytes) at " + site(file, line) +
             " brings the block's static shared memory to " + std::to_string(offset + bytes) + " bytes; the limit is " +
             std::to_string(lim.static_smem_per_block) + " (use dynamic shared memory beyond it)");
    if (offset + bytes + b.config->dynamic_smem > lim.max_dynamic_smem_optin)
        fail("static (" + std::to_string(offset + bytes) + ") + dynamic (" + std::to_string(b.config->dynamic_smem) +
             ") shared memory exceed the " + std::to_string(lim.max_dynamic_smem_optin) + " bytes of a block");
    void* p = b.static_arena + offset;
    std::memset(p, 0xff, bytes);  // poison: an uninitialised read gives NaN / -1
    b.shared.push_back({site_key, bytes, p});
    b.static_used = offset + bytes;
    return p;
}

void* dynamic_shared() {
    current_thread("PTD_DYNAMIC_SHARED");
    return tl_block->dynamic;
}

void report_misaligned(const void* p, const char* what) {
    // Under memcheck's `end` placement an allocation starts where its size puts it; on the
    // GPU it starts 256-byte aligned, so what counts is the offset within the allocation.
    if (sim_memcheck() != SimMemcheck::off && sim_gpu_alignment(p) >= 16) return;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s at address %p: not 16-byte aligned (a misaligned 128-bit access faults on the GPU)",
                  what, p);
    fail(buf);
}

DeviceLimits& device_limits() {
    static DeviceLimits limits;
    return limits;
}

std::string check_launch(const LaunchConfig& c) {
    const DeviceLimits& lim = device_limits();
    const dim3 g = c.grid, bl = c.block;
    if (g.x == 0 || g.y == 0 || g.z == 0 || bl.x == 0 || bl.y == 0 || bl.z == 0)
        return "grid " + dims(g) + " block " + dims(bl) + ": every dimension must be at least 1";
    const uint64_t threads = (uint64_t)bl.x * bl.y * bl.z;
    if (threads > lim.max_threads_per_block)
        return "block " + dims(bl) + " has " + std::to_string(threads) + " threads; at most " +
               std::to_string(lim.max_threads_per_block) + " per block";
    if (bl.x > lim.max_block_x || bl.y > lim.max_block_y || bl.z > lim.max_block_z)
        return "block " + dims(bl) + ": the limits are (" + std::to_string(lim.max_block_x) + ", " +
               std::to_string(lim.max_block_y) + ", " + std::to_string(lim.max_block_z) + ")";
    if (g.x > lim.max_grid_x || g.y > lim.max_grid_y || g.z > lim.max_grid_z)
        return "grid " + dims(g) + ": the limits are (" + std::to_string(lim.max_grid_x) + ", " +
               std::to_string(lim.max_grid_y) + ", " + std::to_string(lim.max_grid_z) + ")";
    size_t allowed = lim.default_dynamic_smem;
    {
        std::lock_guard lock(g_attr_mutex);
        auto it = max_dynamic_smem_table().find(c.kernel);
        if (it != max_dynamic_smem_table().end()) allowed = it->second;
    }
    if (c.dynamic_smem > allowed)
        return "dynamic shared memory of " + std::to_string(c.dynamic_smem) + " bytes exceeds the kernel's limit of " +
               std::to_string(allowed) + " bytes (raise it with PTD_SET_MAX_DYNAMIC_SMEM, up to " +
               std::to_string(lim.max_dynamic_smem_optin) + ")";
    return {};
}

void set_max_dynamic_smem(const char* kernel_name, const char* file, int line, const void* kernel, size_t bytes) {
    const DeviceLimits& lim = device_limits();
    if (bytes > lim.max_dynamic_smem_optin) {
        std::fprintf(stderr,
                     "ptd cuda-sim: %s: PTD_SET_MAX_DYNAMIC_SMEM(%s, %zu): the device allows at most %zu bytes of "
                     "dynamic shared memory per block\n",
                     site(file, line).c_str(), kernel_name, bytes, lim.max_dynamic_smem_optin);
        std::abort();
    }
    std::lock_guard lock(g_attr_mutex);
    max_dynamic_smem_table()[kernel] = bytes;
}

void set_seed(uint64_t base) {
    g_base_seed = base;
    g_base_seed_set = true;
    tl_sim.launches = 0;  // launch numbering restarts: the next launches replay those after the last set_seed(base)
}
uint64_t base_seed() {
    if (!g_base_seed_set.load()) {
        static const uint64_t from_env = read_env_seed();
        return from_env;
    }
    return g_base_seed.load();
}
uint64_t last_launch_seed() { return tl_sim.last_seed; }
uint64_t launch_count() { return tl_sim.launches; }

namespace {
std::mutex& launch_shapes_mutex() {
    static std::mutex m;
    return m;
}
std::map<std::string, LaunchShape>& launch_shapes() {
    static std::map<std::string, LaunchShape> shapes;
    return shapes;
}
}  // namespace

std::map<std::string, LaunchShape> sim_launch_shapes() {
    std::lock_guard lock(launch_shapes_mutex());
    return launch_shapes();
}

void capture_refused(const LaunchConfig& config, const std::string& why) {
    std::fprintf(stderr, "ptd cuda-sim: %s: launch of %s (grid %s block %s, dynamic smem %zu) during a graph capture: %s\n",
                 site(config.file, config.line).c_str(), config.kernel_name, dims(config.grid).c_str(),
                 dims(config.block).c_str(), config.dynamic_smem, why.c_str());
    std::fflush(stderr);
    std::abort();
}

void run_launch(const LaunchConfig& config, void (*body)(void*), void* state) {
    if (tl_block)
        fail(std::string("launch of ") + config.kernel_name + " at " + site(config.file, config.line) +
             " from inside a kernel: dynamic parallelism is not simulated");
    const std::string error = check_launch(config);
    if (!error.empty()) {
        std::fprintf(stderr, "ptd cuda-sim: %s: launch of %s (grid %s block %s, dynamic smem %zu): %s\n",
                     site(config.file, config.line).c_str(), config.kernel_name, dims(config.grid).c_str(),
                     dims(config.block).c_str(), config.dynamic_smem, error.c_str());
        std::fflush(stderr);
        std::abort();
    }
    if (sim_shapes_only()) {  // checked, not run (runtime.h); its shape kept for the resource check
        std::lock_guard lock(launch_shapes_mutex());
        LaunchShape& ls = launch_shapes()[config.kernel_name];
        ls.max_threads = std::max(ls.max_threads, config.block.x * config.block.y * config.block.z);
        ls.max_dynamic_smem = std::max(ls.max_dynamic_smem, config.dynamic_smem);
        ++ls.launches;
        return;
    }
    Simulator& s = tl_sim;
    if (sim_memcheck() != SimMemcheck::off) sim_memcheck_install_handler();
    const uint64_t launch_index = s.launches++;
    s.last_seed = splitmix64(base_seed() ^ splitmix64(launch_index));

    const dim3 bd = config.block, gd = config.grid;
    const size_t n = (size_t)bd.x * bd.y * bd.z;
    const uint64_t blocks = (uint64_t)gd.x * gd.y * gd.z;
    const bool racecheck = blocks > 1 && sim_racecheck();
    const int slots = racecheck ? (int)std::min<uint64_t>(blocks, kResidentBlocks) : 1;
    s.ensure_stacks(n * (size_t)slots);
    if ((int)s.blocks.size() < slots) {
        s.blocks.resize(slots);
        s.static_arena_storage.resize(slots);
        s.dynamic_storage.resize(slots);
    }
    for (int slot = 0; slot < slots; ++slot) {
        BlockState& b = s.blocks[slot];
        b.config = &config;
        b.body = body;
        b.body_state = state;
        b.grid_dim = config.grid;
        b.block_dim = config.block;
        b.launch_index = launch_index;
        b.seed = s.last_seed;
        b.threads.resize(n);
        for (size_t i = 0; i < n; ++i) {
            ThreadState& t = b.threads[i];
            t.rank = (int)i;
            t.idx = uint3{(unsigned)(i % bd.x), (unsigned)(i / bd.x % bd.y), (unsigned)(i / ((size_t)bd.x * bd.y))};
            t.stack_lo = s.stacks[(size_t)slot * n + i] + kGuardBytes;
        }
        std::vector<std::byte>& arena = s.static_arena_storage[slot];
        if (arena.size() < device_limits().static_smem_per_block + 128)
            arena.resize(device_limits().static_smem_per_block + 128);
        b.static_arena =
            reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(arena.data()) + 127) & ~uintptr_t{127});
        std::vector<std::byte>& dynamic = s.dynamic_storage[slot];
        if (dynamic.size() < config.dynamic_smem + 128 + 16) dynamic.resize(config.dynamic_smem + 128 + 16);
        b.dynamic = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(dynamic.data()) + 127) & ~uintptr_t{127});
    }
    BlockState& b = s.blocks[0];

    // Blocks in a shuffled order: block i runs as number (a·i + c) mod count, a coprime to count.
    Rng rng{s.last_seed ^ 0x5bd1e995u};
    uint64_t a = blocks > 1 ? 1 + rng.next() % (blocks - 1) : 1;
    while (std::gcd(a, blocks) != 1) ++a;  // ends at blocks + 1 at the latest
    const uint64_t c = blocks > 1 ? rng.next() % blocks : 0;
    // Makes `slot` block number i of the seeded order: its index, fresh dynamic shared memory
    // (poisoned) and its own seed for the thread order.
    auto enter_block = [&](BlockState& slot, uint64_t i) {
        const uint64_t id = (uint64_t)(((unsigned __int128)a * i + c) % blocks);
        slot.block_idx = uint3{(unsigned)(id % gd.x), (unsigned)(id / gd.x % gd.y), (unsigned)(id / ((uint64_t)gd.x * gd.y))};
        std::memset(slot.dynamic, 0xff, config.dynamic_smem);  // poison
        slot.seed = splitmix64(s.last_seed ^ (id * 0x9e3779b97f4a7c15ull));
    };
    tl_block = &b;
    auto run_blocks = [&](bool reverse) {
        for (uint64_t k = 0; k < blocks; ++k) {
            enter_block(b, reverse ? blocks - 1 - k : k);
            run_block(b);
        }
    };
    // The interleaved order: `slots` blocks resident at once, taken in the seeded order; each
    // round runs one stretch (its threads up to the next barrier) of every resident block in
    // turn, and a block that ends makes room for the next.
    auto run_interleaved = [&] {
        std::vector<std::optional<BlockRun>> runs(slots);
        uint64_t next = 0;
        auto admit = [&](int slot) {
            if (next >= blocks) return;
            enter_block(s.blocks[slot], next++);
            runs[slot].emplace(s.blocks[slot]);
        };
        for (int slot = 0; slot < slots; ++slot) admit(slot);
        for (bool any = true; any;) {
            any = false;
            for (int slot = 0; slot < slots; ++slot) {
                if (!runs[slot]) continue;
                any = true;
                if (runs[slot]->run_stretch()) {
                    runs[slot].reset();
                    admit(slot);
                }
            }
        }
        tl_block = &b;
    };
    if (racecheck) {
        // Racecheck (runtime.h): the same launch from the same memory in the reverse block
        // order, and with blocks interleaved between barriers, must leave every device
        // allocation with the same bits as the seeded order.
        const std::vector<SimAllocation> allocs = sim_allocations();
        auto snapshot = [&] {
            std::vector<std::vector<std::byte>> copy(allocs.size());
            for (size_t j = 0; j < allocs.size(); ++j) {
                const auto* p = reinterpret_cast<const std::byte*>(allocs[j].start);
                copy[j].assign(p, p + allocs[j].bytes);
            }
            return copy;
        };
        auto restore = [&](const std::vector<std::vector<std::byte>>& copy) {
            for (size_t j = 0; j < allocs.size(); ++j)
                std::memcpy(reinterpret_cast<void*>(allocs[j].start), copy[j].data(), allocs[j].bytes);
        };
        auto compare = [&](const std::vector<std::vector<std::byte>>& first, const std::string& order) {
            for (size_t j = 0; j < allocs.size(); ++j) {
                const auto* now = reinterpret_cast<const std::byte*>(allocs[j].start);
                for (size_t off = 0; off < allocs[j].bytes; ++off)
                    if (now[off] != first[j][off]) {
                        tl_block = nullptr;
                        fail(std::string("racecheck: ") + config.kernel_name + " at " + site(config.file, config.line) +
                             " (grid " + dims(config.grid) + ", block " + dims(config.block) + ", seed " +
                             std::to_string(s.last_seed) + "): device allocation '" + allocs[j].tag + "' byte " +
                             std::to_string(off) + " is " + std::to_string((int)first[j][off]) +
                             " after the blocks ran in one order and " + std::to_string((int)now[off]) + " " + order +
                             ": blocks depend on each other's writes");
                    }
            }
        };
        const auto before = snapshot();
        run_blocks(false);
        const auto forward = snapshot();
        restore(before);
        run_blocks(true);
        compare(forward, "in the reverse order");
        restore(before);
        run_interleaved();
        compare(forward, "with " + std::to_string(slots) +
                             " blocks resident and their threads interleaved between barriers");
    } else {
        run_blocks(false);
    }
    b.seed = s.last_seed;
    tl_block = nullptr;
    for (int slot = 0; slot < slots; ++slot) s.blocks[slot].config = nullptr;
    if (sim_memcheck() != SimMemcheck::off) {
        if (const std::string hit = sim_check_canaries(); !hit.empty())
            fail(std::string("memcheck: ") + config.kernel_name + " at " + site(config.file, config.line) + " (grid " +
                 dims(config.grid) + ", block " + dims(config.block) + ", seed " + std::to_string(s.last_seed) + "): " +
                 hit + ". The write went between the allocation and the guard page of this placement; run with " +
                 "PTD_CUDA_SIM_MEMCHECK=" + (sim_memcheck() == SimMemcheck::end ? "start" : "end") +
                 " to have it fault, naming the block and thread");
    }
}

}  // namespace ptd::cuda::sim
