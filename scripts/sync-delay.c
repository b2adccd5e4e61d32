/*
 * sync-delay.so: makes every fsync(2) and fdatasync(2) of the process that
 * preloads it take TANDEM_SYNC_DELAY_US microseconds longer (after the real
 * call, whose result and errno are kept). scripts/db preloads it into the
 * database servers when TANDEM_DB_SYNC_DELAY is set, so one machine can be
 * measured as a disk with cheap syncs (0) and as one with slow syncs (say
 * 1ms), without touching anything else the servers do.
 *
 * Build: cc -shared -fPIC -O2 -o sync-delay.so sync-delay.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

static long delay_ns;
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);

__attribute__((constructor)) static void sync_delay_init(void) {
    const char *s = getenv("TANDEM_SYNC_DELAY_US");
    delay_ns = s ? atol(s) * 1000L : 0;
    if (delay_ns < 0)
        delay_ns = 0;
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
}

static void sync_delay_wait(void) {
    if (delay_ns <= 0)
        return;
    struct timespec ts = {delay_ns / 1000000000L, delay_ns % 1000000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

int fsync(int fd) {
    int r = real_fsync(fd);
    int saved = errno;
    sync_delay_wait();
    errno = saved;
    return r;
}

int fdatasync(int fd) {
    int r = real_fdatasync(fd);
    int saved = errno;
    sync_delay_wait();
    errno = saved;
    return r;
}
