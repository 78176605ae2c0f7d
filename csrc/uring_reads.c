/* ioprobe's direct-read loop: `depth` reads kept in flight on one io_uring, as fio's io_uring
 * engine keeps them, for the device-limit pass (ioprobe/collect/device_limit.py).
 *
 * The same loop exists in Python (collect/uring.py and device_limit._ring_reads); at 4 KiB
 * and 64 in flight, about 90,000 reads a second, that thread spends a third of its time on
 * its own bookkeeping and the depth dips while it does. Here a read costs a few stores.
 *
 * One call sets up a ring, reads until `seconds_ns` pass or `*stop` turns non-zero (checked
 * at least every WAIT_NS), then waits for the reads still in flight at most DRAIN_NS, closes
 * the ring and returns. It allocates nothing and calls no Python: ctypes calls it with the
 * GIL released, from a thread of the caller's, so that the caller's main thread stays free
 * to take Ctrl-C and set `*stop`.
 *
 * Returns 0, or -errno where the ring could not be set up (the caller falls back to its own
 * loop). out[0] reads, out[1] bytes, out[2] ns from the first submission to the last
 * completion, out[3] the errno of the first failed read (0: none), out[4] reads still in
 * flight at return (their buffers must stay mapped), out[5] latencies written to lat.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/io_uring.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WAIT_NS 100000000LL  /* the longest one wait in the kernel lasts: stop is read after */
#define DRAIN_NS 2000000000LL /* the longest reads in flight are waited for once stopped */
#define REAP_SHARE 8          /* a wake-up waits for an eighth of the depth */

#ifndef IORING_SETUP_SINGLE_ISSUER
#define IORING_SETUP_SINGLE_ISSUER (1U << 12)
#endif
#ifndef IORING_SETUP_DEFER_TASKRUN
#define IORING_SETUP_DEFER_TASKRUN (1U << 13)
#endif

typedef struct {
    int fd;
    void *sq_map, *cq_map, *sqe_map;
    size_t sq_len, cq_len, sqe_len;
    unsigned *sq_tail, *sq_array, sq_mask;
    unsigned *cq_head, *cq_tail, cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
} ring_t;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void ring_close(ring_t *r) {
    if (r->sqe_map && r->sqe_map != MAP_FAILED) munmap(r->sqe_map, r->sqe_len);
    if (r->cq_map && r->cq_map != MAP_FAILED && r->cq_map != r->sq_map) munmap(r->cq_map, r->cq_len);
    if (r->sq_map && r->sq_map != MAP_FAILED) munmap(r->sq_map, r->sq_len);
    if (r->fd >= 0) close(r->fd);
}

static int ring_open(ring_t *r, unsigned entries) {
    struct io_uring_params p;
    memset(r, 0, sizeof *r);
    memset(&p, 0, sizeof p);
    /* one thread submits and reaps, and completions are run when it waits for them */
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    r->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    if (r->fd < 0 && errno == EINVAL) { /* a kernel before 6.1 knows neither flag */
        memset(&p, 0, sizeof p);
        r->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    }
    if (r->fd < 0) return -errno;
    /* the waits below carry a timeout (5.11); without it the caller's loop is used */
    if (!(p.features & IORING_FEAT_EXT_ARG)) {
        close(r->fd);
        r->fd = -1;
        return -ENOSYS;
    }
    r->sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP)
        r->sq_len = r->cq_len = r->sq_len > r->cq_len ? r->sq_len : r->cq_len;
    int prot = PROT_READ | PROT_WRITE, flags = MAP_SHARED | MAP_POPULATE;
    r->sq_map = mmap(0, r->sq_len, prot, flags, r->fd, IORING_OFF_SQ_RING);
    if (r->sq_map == MAP_FAILED) goto fail;
    r->cq_map = (p.features & IORING_FEAT_SINGLE_MMAP)
                    ? r->sq_map
                    : mmap(0, r->cq_len, prot, flags, r->fd, IORING_OFF_CQ_RING);
    if (r->cq_map == MAP_FAILED) goto fail;
    r->sqe_len = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqe_map = mmap(0, r->sqe_len, prot, flags, r->fd, IORING_OFF_SQES);
    if (r->sqe_map == MAP_FAILED) goto fail;
    char *sq = r->sq_map, *cq = r->cq_map;
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = *(unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = *(unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    r->sqes = r->sqe_map;
    return 0;
fail: {
    int err = -errno;
    ring_close(r);
    return err;
}
}

/* Submit what is queued and wait for `wait` completions, at most `timeout_ns`. */
static int ring_enter(ring_t *r, unsigned submit, unsigned wait, int64_t timeout_ns) {
    struct __kernel_timespec ts = {timeout_ns / 1000000000LL, timeout_ns % 1000000000LL};
    struct io_uring_getevents_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.ts = (uint64_t)(uintptr_t)&ts;
    unsigned flags = IORING_ENTER_EXT_ARG | (wait ? IORING_ENTER_GETEVENTS : 0);
    long rc = syscall(__NR_io_uring_enter, r->fd, submit, wait, flags, &arg, sizeof arg);
    if (rc < 0 && (errno == ETIME || errno == EINTR || errno == EAGAIN || errno == EBUSY))
        return 0; /* woken with fewer than asked: the loop looks again */
    return rc < 0 ? -errno : (int)rc;
}

#define EXPORT __attribute__((visibility("default")))

EXPORT int ioprobe_uring_reads(const int32_t *fds, const int64_t *offsets, int64_t n_targets,
                               int32_t block, int32_t depth, int64_t seconds_ns, char *buffers,
                               const volatile int32_t *stop, int64_t *lat, int64_t lat_cap,
                               int64_t *out) {
    ring_t r;
    int rc = ring_open(&r, (unsigned)depth);
    if (rc < 0) return rc;
    int64_t sent[depth > 0 ? depth : 1];
    int64_t reads = 0, bytes = 0, kept = 0, k = 0, failed = 0, start = now_ns();
    int64_t deadline = start + seconds_ns, last = start, drain_end = 0;
    unsigned tail = *r.sq_tail, queued = 0, inflight = 0;
    for (int32_t slot = 0; slot < depth; slot++, k++) {
        struct io_uring_sqe *e = &r.sqes[slot];
        memset(e, 0, sizeof *e);
        e->opcode = IORING_OP_READ;
        e->fd = fds[k % n_targets];
        e->off = (uint64_t)offsets[k % n_targets];
        e->addr = (uint64_t)(uintptr_t)(buffers + (int64_t)slot * block);
        e->len = (uint32_t)block;
        e->user_data = (uint64_t)slot;
        r.sq_array[tail & r.sq_mask] = (unsigned)slot;
        tail++;
        queued++;
        sent[slot] = start;
    }
    inflight = (unsigned)depth;
    unsigned batch = depth / REAP_SHARE > 0 ? (unsigned)(depth / REAP_SHARE) : 1;
    while (inflight) {
        atomic_store_explicit((_Atomic unsigned *)r.sq_tail, tail, memory_order_release);
        int64_t t = now_ns();
        int stopping = t >= deadline || *stop || failed;
        if (stopping && !drain_end) drain_end = t + DRAIN_NS;
        if (drain_end && t >= drain_end) break; /* a device that does not answer */
        int64_t wait_ns = WAIT_NS;
        if (drain_end && drain_end - t < wait_ns) wait_ns = drain_end - t;
        unsigned want = inflight < batch ? inflight : batch;
        rc = ring_enter(&r, queued, want, wait_ns);
        if (rc < 0) {
            failed = failed ? failed : -rc;
            if (queued) break; /* the submission itself failed: nothing more will land */
            continue;
        }
        queued -= (unsigned)rc < queued ? (unsigned)rc : queued;
        int64_t now = now_ns();
        int more = now < deadline && !*stop && !failed;
        unsigned head = *r.cq_head;
        unsigned ctail = atomic_load_explicit((_Atomic unsigned *)r.cq_tail, memory_order_acquire);
        for (; head != ctail; head++) {
            struct io_uring_cqe *c = &r.cqes[head & r.cq_mask];
            unsigned slot = (unsigned)c->user_data;
            int res = c->res;
            if (res < 0) {
                failed = failed ? failed : -res;
                more = 0;
                inflight--;
                continue;
            }
            if (kept < lat_cap) lat[kept++] = now - sent[slot];
            reads++;
            bytes += res;
            last = now;
            if (more) {
                struct io_uring_sqe *e = &r.sqes[slot];
                e->fd = fds[k % n_targets];
                e->off = (uint64_t)offsets[k % n_targets];
                k++;
                r.sq_array[tail & r.sq_mask] = slot;
                tail++;
                queued++;
                sent[slot] = now;
            } else {
                inflight--;
            }
        }
        atomic_store_explicit((_Atomic unsigned *)r.cq_head, head, memory_order_release);
    }
    out[0] = reads;
    out[1] = bytes;
    out[2] = last - start;
    out[3] = failed;
    out[4] = inflight;
    out[5] = kept;
    ring_close(&r);
    return 0;
}
