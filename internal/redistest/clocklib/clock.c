// An LD_PRELOAD library that moves a process's wall clock for
// tests (see Options.Clock and Server.SetClock in clock.go). It fakes
// CLOCK_REALTIME (and its coarse variant), gettimeofday and time; the
// monotonic clocks stay real. Redis reads the time for key expiry through
// gettimeofday, so a moved clock expires keys early or late, as a stepped
// or drifting host clock would.
//
// The file named by LOCKGATE_CLOCK_FILE holds "real_ns fake_ns rate_ppm":
// the clock read fake_ns when real time was real_ns, and runs at rate_ppm
// millionths of real speed (Unix nanoseconds). Without the file the clock
// is real. The file is read at most every 10 ms of real time; since it
// holds the whole state, a restarted process reads the same clock. Real time comes from the clock_gettime system
// call, not from the next library, so nothing here allocates or resolves
// symbols: allocators that read the clock while they start (Redis's
// jemalloc) do not recurse into an uninitialized library.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile char lk;
static int started;
static int64_t base_real, base_fake, next_check;
static int64_t rate_ppm = 1000000;

static int64_t sys_now(clockid_t clk) {
  struct timespec ts;
  syscall(SYS_clock_gettime, clk, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t fake_at(int64_t real) {
  return base_fake + (int64_t)((__int128)(real - base_real) * rate_ppm / 1000000);
}

static int parse(const char *s, int64_t *real, int64_t *fake, int64_t *ppm) {
  int64_t v[3];
  for (int i = 0; i < 3; i++) {
    while (*s == ' ' || *s == '\n') s++;
    int neg = 0;
    if (*s == '-') { neg = 1; s++; }
    if (*s < '0' || *s > '9') return -1;
    int64_t n = 0;
    while (*s >= '0' && *s <= '9') n = n * 10 + (*s++ - '0');
    v[i] = neg ? -n : n;
  }
  *real = v[0]; *fake = v[1]; *ppm = v[2];
  return 0;
}

static void refresh(int64_t real) {
  int64_t mono = sys_now(CLOCK_MONOTONIC);
  if (started && mono < next_check) return;
  if (!started) { base_real = base_fake = real; started = 1; }
  (void)real;
  next_check = mono + 10000000;
  const char *path = getenv("LOCKGATE_CLOCK_FILE");
  if (!path) return;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return;
  buf[n] = 0;
  int64_t r, f, ppm;
  if (parse(buf, &r, &f, &ppm) != 0 || ppm <= 0) return;
  base_real = r;
  base_fake = f;
  rate_ppm = ppm;
}

static int64_t fake_now(void) {
  int64_t real = sys_now(CLOCK_REALTIME);
  while (__atomic_test_and_set(&lk, __ATOMIC_ACQUIRE)) {}
  refresh(real);
  int64_t f = fake_at(real);
  __atomic_clear(&lk, __ATOMIC_RELEASE);
  return f;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
  if (clk != CLOCK_REALTIME && clk != CLOCK_REALTIME_COARSE) {
    return syscall(SYS_clock_gettime, clk, ts);
  }
  int64_t f = fake_now();
  ts->tv_sec = f / 1000000000;
  ts->tv_nsec = f % 1000000000;
  return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  (void)tz;
  int64_t f = fake_now();
  if (tv) {
    tv->tv_sec = f / 1000000000;
    tv->tv_usec = (f % 1000000000) / 1000;
  }
  return 0;
}

time_t time(time_t *t) {
  time_t s = (time_t)(fake_now() / 1000000000);
  if (t) *t = s;
  return s;
}
