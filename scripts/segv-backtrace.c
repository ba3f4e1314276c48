/* A backtrace for a process that dies of SIGSEGV, SIGBUS or SIGFPE where no
 * debugger is installed (the GPU image has none). Preloaded
 * (LD_PRELOAD=segv-backtrace.so), it handles those signals itself, printing
 * the frames as "object(+offset)" lines (addr2line -e OBJECT OFFSET names
 * them), and then hands the signal to the handler the program installed, so
 * the program's own crash report still follows. Programs that install their
 * own handler (doctest does) get theirs behind this one: sigaction() for
 * these signals is intercepted.
 *
 *   cc -shared -fPIC -O1 -o segv-backtrace.so scripts/segv-backtrace.c -ldl
 *   LD_PRELOAD=$PWD/segv-backtrace.so ./program
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

typedef int (*sigaction_fn)(int, const struct sigaction*, struct sigaction*);
static sigaction_fn real_sigaction;
static struct sigaction chained[65];
static const int watched[] = {SIGSEGV, SIGBUS, SIGFPE};

static int is_watched(int sig) {
  for (unsigned i = 0; i < sizeof watched / sizeof watched[0]; ++i)
    if (watched[i] == sig) return 1;
  return 0;
}

static void say(const char* s) {
  ssize_t n = write(2, s, strlen(s));
  (void)n;
}

static void on_fault(int sig, siginfo_t* info, void* ctx) {
  void* frames[64];
  int n = backtrace(frames, 64);
  say("\nsegv-backtrace: ");
  say(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGFPE");
  say(", frames (innermost first):\n");
  backtrace_symbols_fd(frames, n, 2);
  say("segv-backtrace: end of frames\n");
  const struct sigaction* next = &chained[sig];
  if ((next->sa_flags & SA_SIGINFO) && next->sa_sigaction != NULL) {
    next->sa_sigaction(sig, info, ctx);
  } else if (!(next->sa_flags & SA_SIGINFO) && next->sa_handler != SIG_DFL && next->sa_handler != SIG_IGN &&
             next->sa_handler != NULL) {
    next->sa_handler(sig);
  }
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  real_sigaction(sig, &dfl, NULL);
  raise(sig);
}

static void install(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  real_sigaction(sig, &sa, NULL);
}

int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (real_sigaction == NULL) real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
  if (sig > 0 && sig < 65 && is_watched(sig)) {
    if (old != NULL) *old = chained[sig];
    if (act != NULL) chained[sig] = *act;
    return 0;  /* ours stays installed; theirs runs after it */
  }
  return real_sigaction(sig, act, old);
}

__attribute__((constructor)) static void segv_backtrace_init(void) {
  if (real_sigaction == NULL) real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
  void* warm[1];
  backtrace(warm, 1); /* loads libgcc's unwinder now, not inside the handler */
  for (unsigned i = 0; i < sizeof watched / sizeof watched[0]; ++i) install(watched[i]);
}
