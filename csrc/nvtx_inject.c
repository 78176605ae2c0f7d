/* ioprobe's NVTX injection library: per-range CPU and wall time without Nsight.
 *
 * NVTX v3 is header-only: every library built with it (DALI's among them) reads
 * NVTX_INJECTION64_PATH on its first NVTX call, dlopens that path and calls
 * InitializeInjectionNvtx2, which may replace the no-op entry points with its own. This one
 * aggregates, per name of DALI's own ranges ("[DALI]..."; other ranges are passed over): how
 * many times it ran, its wall time, the CPU time of the thread that opened it, and, for
 * operator ranges ("[DALI][CPU op] ...", "[DALI][GPU op] ...",
 * "[DALI][Mixed op] ..."), a share of the CPU time DALI's thread pool spent while it was open:
 * an operator hands its samples to the pool and waits, so the pool's time is the operator's.
 *
 * Costs per DALI range: two clock reads and a few atomic adds (another range: a prefix
 * compare); operator ranges also read each pool
 * thread's CPU clock under a mutex, once per operator per iteration, never per sample. Nothing
 * is allocated after a name is first seen. ioprobe reads the totals through the exported
 * ioprobe_nvtx_* functions (ctypes) and diffs them between the start and end of an epoch.
 */
#define _GNU_SOURCE /* clock ids, strdup */
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_NAMES 1024 /* distinct range names; a power of two (open addressing) */
#define MAX_DEPTH 64   /* nesting per thread */
#define MAX_POOL 512   /* pool threads tracked */
#define MAX_OPEN 256   /* operator ranges open at once, all threads */
#define NAME_LEN 200

typedef struct {
    _Atomic(char *) name;
    atomic_uint_fast64_t count, wall_ns, cpu_ns, pool_ns;
} slot_t;

typedef struct {
    int slot; /* -1: a range we could not name (its pop must still balance) */
    int op;
    uint64_t wall0, cpu0;
} frame_t;

static slot_t slots[MAX_NAMES];
static atomic_uint_fast64_t dropped;       /* ranges whose name found no free slot */
static atomic_int inits;                   /* libraries that loaded us */
static atomic_uint_fast64_t unattributed;  /* pool CPU while no operator range was open */

static __thread frame_t stack[MAX_DEPTH];
static __thread int depth;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t pool_tids[MAX_POOL];
static uint64_t pool_last[MAX_POOL]; /* last CPU reading; kept when the thread has exited */
static int n_pool;
static int open_slots[MAX_OPEN];
static int n_open;
static uint64_t pool_seen; /* pool CPU already handed out */
static char domain_tag;    /* every domain handle points here: names carry no domain */

static uint64_t clock_ns(clockid_t c) {
    struct timespec t;
    if (clock_gettime(c, &t) != 0) return 0;
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Linux: another thread's CPU clock in this process, as pthread_getcpuclockid would give. */
static clockid_t thread_clock(pid_t tid) { return (clockid_t)((~(unsigned)tid) << 3) | 6; }

/* Range names as DALI makes them: "[DALI][DataReader] Prefetch #12". The counter would give
 * every call its own name; cut it off. */
static size_t normalise(const char *in, char *out) {
    size_t n = 0;
    for (; in[n] && n < NAME_LEN - 1; n++) {
        if (in[n] == ' ' && in[n + 1] == '#') break;
        out[n] = in[n];
    }
    out[n] = 0;
    return n;
}

static int lookup(const char *raw) {
    char name[NAME_LEN];
    size_t n = normalise(raw, name);
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)name[i]) * 1099511628211u;
    for (unsigned probe = 0; probe < MAX_NAMES; probe++) {
        int i = (int)((h + probe) & (MAX_NAMES - 1));
        char *have = atomic_load_explicit(&slots[i].name, memory_order_acquire);
        if (have == NULL) {
            char *mine = strdup(name);
            if (mine == NULL) break;
            char *expected = NULL;
            if (atomic_compare_exchange_strong(&slots[i].name, &expected, mine)) return i;
            free(mine);
            have = expected; /* another thread took the slot first: maybe with this name */
        }
        if (strcmp(have, name) == 0) return i;
    }
    atomic_fetch_add(&dropped, 1);
    return -1;
}

static const char *message(const nvtxEventAttributes_t *a) {
    if (a == NULL) return NULL;
    if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) return a->message.ascii;
    /* registered strings are handles we returned: pointers to interned names */
    if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED) return (const char *)a->message.registered;
    return NULL;
}

static int is_operator(const char *m) {
    return strncmp(m, "[DALI][CPU op]", 14) == 0 || strncmp(m, "[DALI][GPU op]", 14) == 0 ||
           strncmp(m, "[DALI][Mixed op]", 16) == 0;
}

/* Hand the pool CPU time accrued since the last call to the operator ranges open now, in equal
 * shares. Called with `pool_lock` held. */
static void settle(void) {
    uint64_t total = 0;
    for (int i = 0; i < n_pool; i++) {
        uint64_t v = clock_ns(thread_clock(pool_tids[i]));
        if (v >= pool_last[i]) pool_last[i] = v; /* 0: the thread exited; keep its last value */
        total += pool_last[i];
    }
    uint64_t delta = total > pool_seen ? total - pool_seen : 0;
    pool_seen = total;
    if (delta == 0) return;
    if (n_open == 0) {
        atomic_fetch_add(&unattributed, delta);
        return;
    }
    uint64_t share = delta / (uint64_t)n_open;
    for (int i = 0; i < n_open; i++) atomic_fetch_add(&slots[open_slots[i]].pool_ns, share);
}

static void push(const char *m) {
    if (depth >= MAX_DEPTH) {
        depth++;
        return;
    }
    frame_t *f = &stack[depth++];
    /* Only DALI's own ranges ("[DALI]...": its operators, its loader's reads) feed a figure.
     * The rest (the executor's bookkeeping, each sample's decode spans, a script's own ranges:
     * about 4 in 5 of a decoding pipeline's) are read by nothing, and timing one costs two
     * system calls: they keep their place on the stack and nothing else. */
    if (m == NULL || strncmp(m, "[DALI]", 6) != 0) {
        f->slot = -1;
        f->op = 0;
        return;
    }
    f->slot = lookup(m);
    f->op = f->slot >= 0 && is_operator(m);
    if (f->op) {
        pthread_mutex_lock(&pool_lock);
        settle();
        if (n_open < MAX_OPEN) open_slots[n_open++] = f->slot;
        else f->op = 0;
        pthread_mutex_unlock(&pool_lock);
    }
    f->cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    f->wall0 = clock_ns(CLOCK_MONOTONIC);
}

static void pop(void) {
    if (depth <= 0) return; /* a pop without its push: a range opened before we were loaded */
    if (--depth >= MAX_DEPTH) return;
    frame_t *f = &stack[depth];
    if (f->slot < 0) return;
    uint64_t wall = clock_ns(CLOCK_MONOTONIC);
    uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    slot_t *s = &slots[f->slot];
    atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->wall_ns, wall - f->wall0, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->cpu_ns, cpu - f->cpu0, memory_order_relaxed);
    if (f->op) {
        pthread_mutex_lock(&pool_lock);
        settle();
        for (int i = 0; i < n_open; i++) {
            if (open_slots[i] == f->slot) {
                open_slots[i] = open_slots[--n_open];
                break;
            }
        }
        pthread_mutex_unlock(&pool_lock);
    }
}

/* ---- the NVTX entry points we replace ------------------------------------------------ */

static int domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    (void)d;
    push(message(a));
    return depth - 1;
}

static int domain_pop(nvtxDomainHandle_t d) {
    (void)d;
    pop();
    return depth;
}

static int push_ex(const nvtxEventAttributes_t *a) {
    push(message(a));
    return depth - 1;
}

static int push_a(const char *m) {
    push(m);
    return depth - 1;
}

static int pop_plain(void) {
    pop();
    return depth;
}

static nvtxDomainHandle_t domain_create(const char *name) {
    (void)name;
    return (nvtxDomainHandle_t)&domain_tag;
}

static void domain_destroy(nvtxDomainHandle_t d) { (void)d; }

static nvtxStringHandle_t register_string(nvtxDomainHandle_t d, const char *s) {
    (void)d;
    int i = lookup(s);
    return i < 0 ? NULL : (nvtxStringHandle_t)atomic_load(&slots[i].name);
}

static void name_thread(uint32_t tid, const char *name) {
    /* DALI names its pool threads "[DALI][TP<n>]<pipeline>" */
    if (name == NULL || strncmp(name, "[DALI][TP", 9) != 0) return;
    pthread_mutex_lock(&pool_lock);
    if (n_pool < MAX_POOL) {
        pool_tids[n_pool] = (pid_t)tid;
        pool_last[n_pool] = clock_ns(thread_clock((pid_t)tid));
        pool_seen += pool_last[n_pool]; /* time spent before we knew the thread is nobody's */
        n_pool++;
    }
    pthread_mutex_unlock(&pool_lock);
}

/* A forked child has none of the parent's threads: no pool to read, no operator open, and a
 * lock that another parent thread may have held at the fork. */
static void after_fork_in_child(void) {
    pthread_mutex_init(&pool_lock, NULL);
    n_pool = 0;
    n_open = 0;
    pool_seen = 0;
}

static void set(NvtxFunctionTable t, unsigned size, unsigned id, NvtxFunctionPointer fn) {
    if (t != NULL && id < size && t[id] != NULL) *t[id] = fn;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    if (cb == NULL || cb->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
    NvtxFunctionTable t;
    unsigned size;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &size)) {
        set(t, size, NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)domain_push);
        set(t, size, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)domain_pop);
        set(t, size, NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)domain_create);
        set(t, size, NVTX_CBID_CORE2_DomainDestroy, (NvtxFunctionPointer)domain_destroy);
        set(t, size, NVTX_CBID_CORE2_DomainRegisterStringA, (NvtxFunctionPointer)register_string);
    }
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &size)) {
        set(t, size, NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)push_ex);
        set(t, size, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)push_a);
        set(t, size, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)pop_plain);
        set(t, size, NVTX_CBID_CORE_NameOsThreadA, (NvtxFunctionPointer)name_thread);
    }
    if (atomic_fetch_add(&inits, 1) == 0) pthread_atfork(NULL, NULL, after_fork_in_child);
    return 1;
}

/* ---- what ioprobe reads (ctypes) ------------------------------------------------------ */

#define EXPORT __attribute__((visibility("default")))

EXPORT int ioprobe_nvtx_inits(void) { return atomic_load(&inits); }
EXPORT int ioprobe_nvtx_slots(void) { return MAX_NAMES; }
EXPORT uint64_t ioprobe_nvtx_dropped(void) { return atomic_load(&dropped); }
EXPORT int ioprobe_nvtx_pool_threads(void) { return n_pool; }

EXPORT const char *ioprobe_nvtx_name(int i) {
    return i >= 0 && i < MAX_NAMES ? atomic_load(&slots[i].name) : NULL;
}

/* count, wall ns, own-thread CPU ns, pool CPU ns; the pool is settled first so that an
 * operator still running has its share so far */
EXPORT void ioprobe_nvtx_read(int i, uint64_t out[4]) {
    if (i < 0 || i >= MAX_NAMES) return;
    out[0] = atomic_load(&slots[i].count);
    out[1] = atomic_load(&slots[i].wall_ns);
    out[2] = atomic_load(&slots[i].cpu_ns);
    out[3] = atomic_load(&slots[i].pool_ns);
}

EXPORT uint64_t ioprobe_nvtx_settle(void) {
    pthread_mutex_lock(&pool_lock);
    settle();
    pthread_mutex_unlock(&pool_lock);
    return atomic_load(&unattributed);
}
