/* A backtrace for a process that dies of SIGSEGV, SIGBUS or SIGFPE where no
 * debugger is installed (the GPU image has none). Preloaded
 * (LD_PRELOAD=segv-backtrace.so), it handles those signals itself, printing
 * the frames as "object(+offset)" lines (addr2line -e OBJECT OFFSET names
 * them), and then hands the signal to the handler the program installed, so
 * the program's own crash report still follows. Programs that install their
 * own handler (doctest does) get theirs behind this one: sigaction() for
 * these signals is intercepted.
 *
 * Before the frames it prints the faulting address, the instruction pointer
 * and, on x86-64, the word at the top of the stack, each as object+offset:
 * a call through a null pointer leaves backtrace() nothing to unwind from,
 * and the top of the stack then holds the return address into its caller.
 *
 *   cc -shared -fPIC -O1 -o segv-backtrace.so scripts/segv-backtrace.c -ldl
 *   LD_PRELOAD=$PWD/segv-backtrace.so ./program
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
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

/* "what: 0x... (object+0x...)", with write(2) alone (async-signal-safe). */
static void say_address(const char* what, const void* p) {
  char hex[2 + 16 + 1];
  uintptr_t v = (uintptr_t)p;
  hex[0] = '0';
  hex[1] = 'x';
  for (int i = 0; i < 16; ++i) hex[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 0xf];
  hex[18] = 0;
  say("segv-backtrace: ");
  say(what);
  say(": ");
  say(hex);
  Dl_info dl;
  if (p != NULL && dladdr(p, &dl) != 0 && dl.dli_fname != NULL) {
    uintptr_t off = v - (uintptr_t)dl.dli_fbase;
    for (int i = 0; i < 16; ++i) hex[2 + i] = "0123456789abcdef"[(off >> (60 - 4 * i)) & 0xf];
    say(" (");
    say(dl.dli_fname);
    say("+");
    say(hex);
    if (dl.dli_sname != NULL) {
      say(" in ");
      say(dl.dli_sname);
    }
    say(")");
  }
  say("\n");
}

static void on_fault(int sig, siginfo_t* info, void* ctx) {
  void* frames[64];
  int n = backtrace(frames, 64);
  say("\nsegv-backtrace: ");
  say(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGFPE");
  say("\n");
  say_address("faulting address", info != NULL ? info->si_addr : NULL);
#if defined(__x86_64__)
  if (ctx != NULL) {
    const greg_t* regs = ((const ucontext_t*)ctx)->uc_mcontext.gregs;
    say_address("instruction pointer", (const void*)regs[REG_RIP]);
    const void* const* top = (const void* const*)regs[REG_RSP];
    /* Not where the fault is (a stack overflow faults at the stack pointer:
     * reading there would fault again inside this handler). */
    const uintptr_t fault = (uintptr_t)(info != NULL ? info->si_addr : NULL), sp = (uintptr_t)top;
    const int near = fault + 65536 > sp && fault < sp + 65536;
    if (top != NULL && !near) say_address("top of stack (a null call's return address)", *top);
  }
#endif
  say("segv-backtrace: frames (innermost first):\n");
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
