/* `/.harness-helper trace -- PROG ARGS...`: runs PROG under a ptrace tracer and writes, when PROG ends, what
 * its whole process tree executed, opened for reading and looked up in vain, as JSON lines on the tracer's
 * own stderr (PROG's stderr goes to its stdout, so nothing the traced code writes can mix into the trace).
 * Included by helper.c: one static binary, shipped into every native container.
 *
 * Why ptrace + seccomp-bpf (docs/scoring.md "The traced verifier"): tracing one's own children needs no
 * capability (Docker's default seccomp profile allows ptrace, the grading containers have none), works for
 * static binaries and every interpreter alike, and the kernel filter stops the tracee only at execve and the
 * open family, once each (the tracer resolves an open's path itself at its entry), so the rest of the
 * verifier runs at full speed. LD_PRELOAD misses static binaries and is visible
 * to the traced code; fanotify and eBPF need privileges the containers lack.
 *
 * Records (one JSON object a line; paths absolute, as asked and as resolved by the kernel):
 *   {"e":"f","p":CHILD,"pp":PARENT}                          a fork, vfork or clone
 *   {"e":"x","p":PID,"a":ASKED,"r":EXE,"s":SCRIPT,"cwd":DIR,"argv":[...]}   a successful execve
 *   {"e":"o","p":PID,"a":ASKED,"r":RESOLVED}                  a successful open for reading
 *   {"e":"m","p":PID,"a":ASKED}                               a lookup that failed (an open or an exec)
 *   {"e":"d","p":PID,"a":ASKED}                               an open of the tracer's own /proc files, refused
 *   {"e":"c","p":PID}                                        a syscall of another ABI (i386, x32), untraced
 *   {"e":"end","root":STATUS,"events":N,"dropped":D}         always last; its absence means the trace is cut
 * Duplicates (same record, same process) are written once. Opens for writing only, of folders, and of
 * /proc, /sys and /dev are not recorded: they load nothing.
 * When PROG exits, whatever it left running is killed: the verifier is over (a traced daemon could not run
 * on without its tracer anyway). */
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/uio.h>

#if defined(__x86_64__)
#define TR_ARCH AUDIT_ARCH_X86_64
enum { NR_OPEN = 2, NR_EXECVE = 59, NR_OPENAT = 257, NR_EXECVEAT = 322, NR_OPENAT2 = 437 };
/* stat and access are not stopped: programs are judged by the name they were run with, and the misses that
 * matter (Perl's @INC, the loader's folders) are failed opens */
static const int traced_nrs[] = {NR_OPEN, NR_EXECVE, NR_OPENAT, NR_EXECVEAT, NR_OPENAT2};
#endif

#define TR_MAX_OUT (64u << 20) /* a trace larger than this is cut (and says so): a runaway verifier */

static buf_t tr_out;
static long tr_events, tr_dropped;
static pid_t tr_self;

/* ------------------------------------------------------------------ seen-set (dedupe) */
static uint64_t *tr_seen;
static size_t tr_seen_cap, tr_seen_n;
static uint64_t fnv(const char *s, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ULL; }
    return h;
}
static int seen_add(uint64_t h) { /* 1 when new */
    if (!h) h = 1;
    if (tr_seen_n * 2 >= tr_seen_cap) {
        size_t nc = tr_seen_cap ? tr_seen_cap * 2 : 4096;
        uint64_t *n = calloc(nc, sizeof *n), *old = tr_seen;
        if (!n) return 1;
        for (size_t i = 0; i < tr_seen_cap; i++)
            if (old[i]) { size_t j = old[i] % nc; while (n[j]) j = (j + 1) % nc; n[j] = old[i]; }
        free(old); tr_seen = n; tr_seen_cap = nc;
    }
    size_t j = h % tr_seen_cap;
    while (tr_seen[j]) { if (tr_seen[j] == h) return 0; j = (j + 1) % tr_seen_cap; }
    tr_seen[j] = h; tr_seen_n++;
    return 1;
}

static void emit(buf_t *line) { /* one record, deduplicated, bounded */
    if (seen_add(fnv(line->p, line->n, 14695981039346656037ULL))) {
        if (tr_out.n + line->n + 1 > TR_MAX_OUT) tr_dropped++;
        else { bput(&tr_out, line->p, line->n); bstr(&tr_out, "\n"); tr_events++; }
    }
    free(line->p); line->p = NULL; line->n = line->cap = 0;
}

/* ------------------------------------------------------------------ reading the tracee */
static int peek_str(pid_t pid, unsigned long addr, char *out, size_t cap) { /* 0 ok */
    size_t n = 0;
    if (!addr) return -1;
    while (n + 1 < cap) { /* one read per page at most: a string may end just before an unmapped page */
        size_t want = 4096 - ((addr + n) & 4095);
        if (want > cap - 1 - n) want = cap - 1 - n;
        struct iovec local = {out + n, want}, remote = {(void *)(addr + n), want};
        ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (got <= 0) break;
        char *z = memchr(out + n, 0, (size_t)got);
        if (z) return 0;
        n += (size_t)got;
    }
    if (n == 0) { /* no process_vm_readv (or it failed): word by word */
        while (n + sizeof(long) < cap) {
            errno = 0;
            long w = ptrace(PTRACE_PEEKDATA, pid, (void *)(addr + n), NULL);
            if (errno) return -1;
            memcpy(out + n, &w, sizeof w);
            for (size_t i = 0; i < sizeof w; i++) if (out[n + i] == 0) return 0;
            n += sizeof w;
        }
    }
    out[cap - 1] = 0;
    return 0;
}
static unsigned long peek_word(pid_t pid, unsigned long addr) {
    errno = 0;
    long w = ptrace(PTRACE_PEEKDATA, pid, (void *)addr, NULL);
    return errno ? 0 : (unsigned long)w;
}
static int proc_link(pid_t pid, const char *what, char *out, size_t cap) { /* readlink /proc/PID/WHAT */
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/%s", pid, what);
    ssize_t n = readlink(p, out, cap - 1);
    if (n < 0) { out[0] = 0; return -1; }
    out[n] = 0;
    return 0;
}
/* PATH asked relative to DIRFD, made absolute (not resolved: that is the kernel's answer, read after) */
static void absolute(pid_t pid, long dirfd, const char *path, char *out, size_t cap) {
    if (path[0] == '/') { snprintf(out, cap, "%s", path); return; }
    char base[PATH_MAX], what[32];
    if ((int)dirfd == AT_FDCWD) snprintf(what, sizeof what, "cwd");
    else snprintf(what, sizeof what, "fd/%d", (int)dirfd);
    if (proc_link(pid, what, base, sizeof base) != 0) snprintf(base, sizeof base, "?");
    snprintf(out, cap, "%s%s%s", base, strcmp(base, "/") ? "/" : "", path);
}

/* ------------------------------------------------------------------ per-tracee state */
typedef struct {
    pid_t pid;
    int nr;            /* syscall stopped at its entry, -1 none */
    int deny, rdonly, started;
    char path[PATH_MAX];
    char cwd[PATH_MAX];
    buf_t argv;        /* a JSON array, for execve */
} tracee_t;
static tracee_t *trs;
static size_t ntrs, captrs;
static tracee_t *tracee(pid_t pid, int make) {
    for (size_t i = 0; i < ntrs; i++) if (trs[i].pid == pid) return &trs[i];
    if (!make) return NULL;
    if (ntrs == captrs) {
        captrs = captrs ? captrs * 2 : 64;
        trs = realloc(trs, captrs * sizeof *trs);
        if (!trs) _exit(99);
    }
    tracee_t *t = &trs[ntrs++];
    memset(t, 0, sizeof *t);
    t->pid = pid; t->nr = -1;
    return t;
}
static void forget(pid_t pid) {
    for (size_t i = 0; i < ntrs; i++)
        if (trs[i].pid == pid) { free(trs[i].argv.p); trs[i] = trs[--ntrs]; return; }
}

static void record_path(const char *e, pid_t pid, const char *asked, const char *resolved) {
    buf_t b = {0};
    bfmt(&b, "{\"e\":\"%s\",\"p\":%d,\"a\":", e, pid);
    bjson_str(&b, asked, strlen(asked));
    if (resolved) { bstr(&b, ",\"r\":"); bjson_str(&b, resolved, strlen(resolved)); }
    bstr(&b, "}");
    emit(&b);
}
static int noise(const char *p) {
    return !strncmp(p, "/proc/", 6) || !strncmp(p, "/sys/", 5) || !strncmp(p, "/dev/", 5);
}

#if defined(__x86_64__)
static void on_entry(pid_t pid, tracee_t *t) {
    struct user_regs_struct r;
    if (ptrace(PTRACE_GETREGS, pid, NULL, &r) != 0) return;
    long nr = (long)r.orig_rax;
    unsigned long a0 = r.rdi, a1 = r.rsi, a2 = r.rdx, a3 = r.r10;
    long dirfd = AT_FDCWD;
    unsigned long paddr = 0;
    long flags = 0;
    t->nr = (int)nr; t->deny = 0; t->rdonly = 1; t->path[0] = 0;
    switch (nr) {
    case NR_OPEN: paddr = a0; flags = (long)a1; break;
    case NR_OPENAT: dirfd = (long)a0; paddr = a1; flags = (long)a2; break;
    case NR_OPENAT2: dirfd = (long)a0; paddr = a1; flags = (long)peek_word(pid, a2); break;
    case NR_EXECVE: paddr = a0; break;
    case NR_EXECVEAT: dirfd = (long)a0; paddr = a1; break;
    default: t->nr = -1; return;
    }
    char raw[PATH_MAX];
    if (peek_str(pid, paddr, raw, sizeof raw) != 0 || !raw[0]) { t->nr = -1; return; } /* fstat of an fd */
    absolute(pid, dirfd, raw, t->path, sizeof t->path);
    if (nr == NR_OPEN || nr == NR_OPENAT || nr == NR_OPENAT2) {
        t->rdonly = (flags & O_ACCMODE) != O_WRONLY && !(flags & O_DIRECTORY);
        /* the tracer's own /proc files (its memory, the trace's pipe) are not the verifier's to open */
        char mine[32];
        int n = snprintf(mine, sizeof mine, "/proc/%d/", tr_self);
        if (!strncmp(t->path, mine, (size_t)n) || !strncmp(raw, mine, (size_t)n)) {
            t->deny = 1;
            r.orig_rax = (unsigned long)-1; /* skipped; -EACCES set at its exit */
            ptrace(PTRACE_SETREGS, pid, NULL, &r);
            return;
        }
        /* resolved here, at the call's entry, by the tracer itself (same root, same user), so the call runs
         * on without a second stop at its exit: half the cost of tracing an open */
        char res[PATH_MAX];
        if (t->rdonly && !noise(t->path)) {
            if (realpath(t->path, res)) {
                if (!noise(res)) record_path("o", pid, t->path, res);
            } else if (errno == ENOENT || errno == ENOTDIR) {
                record_path("m", pid, t->path, NULL);
            }
        }
        t->nr = -1;
        return;
    }
    if (nr == NR_EXECVE || nr == NR_EXECVEAT) {
        unsigned long av = nr == NR_EXECVE ? a1 : a2;
        free(t->argv.p); memset(&t->argv, 0, sizeof t->argv);
        bstr(&t->argv, "[");
        for (int i = 0; i < 16; i++) {
            unsigned long p = peek_word(pid, av + (unsigned long)i * sizeof(long));
            char arg[512];
            if (!p || peek_str(pid, p, arg, sizeof arg) != 0) break;
            if (i) bstr(&t->argv, ",");
            bjson_str(&t->argv, arg, strlen(arg));
        }
        bstr(&t->argv, "]");
        proc_link(pid, "cwd", t->cwd, sizeof t->cwd);
        (void)a3;
    }
}

static void on_exit_stop(pid_t pid, tracee_t *t) { /* a refused open, or an execve that failed */
    struct user_regs_struct r;
    if (t->nr < 0 || ptrace(PTRACE_GETREGS, pid, NULL, &r) != 0) { t->nr = -1; return; }
    long ret = (long)r.rax;
    if (t->deny) {
        r.rax = (unsigned long)-EACCES;
        ptrace(PTRACE_SETREGS, pid, NULL, &r);
        record_path("d", pid, t->path, NULL);
    } else if ((ret == -ENOENT || ret == -ENOTDIR) && !noise(t->path)) {
        record_path("m", pid, t->path, NULL);
    }
    t->nr = -1;
}
#endif

static void on_exec(pid_t pid, pid_t former) {
    tracee_t *t = tracee(former, 0);
    if (former != pid) { /* a thread but the leader exec'd: it now has the leader's id */
        tracee_t *lead = tracee(pid, 1);
        t = tracee(former, 0);
        if (t) { free(lead->argv.p); *lead = *t; lead->pid = pid; memset(&t->argv, 0, sizeof t->argv); forget(former); }
        t = lead;
    }
    if (!t) t = tracee(pid, 1);
    char exe[PATH_MAX], script[PATH_MAX];
    proc_link(pid, "exe", exe, sizeof exe);
    buf_t b = {0};
    bfmt(&b, "{\"e\":\"x\",\"p\":%d,\"a\":", pid);
    bjson_str(&b, t->path, strlen(t->path));
    bstr(&b, ",\"r\":"); bjson_str(&b, exe, strlen(exe));
    if (realpath(t->path, script)) { bstr(&b, ",\"s\":"); bjson_str(&b, script, strlen(script)); }
    bstr(&b, ",\"cwd\":"); bjson_str(&b, t->cwd, strlen(t->cwd));
    bstr(&b, ",\"argv\":"); bstr(&b, t->argv.p ? t->argv.p : "[]");
    bstr(&b, "}");
    emit(&b);
    t->nr = -1;
}

static int trace_main(int argc, char **argv) {
    if (argc < 1) { fprintf(stderr, "usage: helper trace -- PROG ARGS...\n"); return 2; }
    tr_self = getpid();
#if !defined(__x86_64__)
    /* no tracer for this architecture: run untraced and say so */
    pid_t c = fork();
    if (c == 0) { dup2(1, 2); execvp(argv[0], argv); _exit(127); }
    int st = 0; waitpid(c, &st, 0);
    fprintf(stderr, "{\"e\":\"untraced\"}\n{\"e\":\"end\",\"root\":%d,\"events\":0,\"dropped\":0}\n", st);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
#else
    struct sock_filter f[64];
    int n = 0, k = (int)(sizeof traced_nrs / sizeof traced_nrs[0]);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TR_ARCH, 1, 0);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE | 1); /* another ABI */
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1);     /* x32 */
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE | 1);
    for (int i = 0; i < k; i++) {
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)traced_nrs[i], 0, 1);
        f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE);
    }
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {(unsigned short)n, f};

    pid_t root = fork();
    if (root < 0) { perror("fork"); return 126; }
    if (root == 0) {
        dup2(1, 2); /* the traced tree's stderr joins its stdout: our stderr carries the trace alone */
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0) { perror("ptrace"); _exit(126); }
        raise(SIGSTOP);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
            perror("seccomp"); _exit(126);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    int st = 0, root_status = -1;
    if (waitpid(root, &st, __WALL) < 0 || !WIFSTOPPED(st)) return 126;
    ptrace(PTRACE_SETOPTIONS, root, NULL,
           (void *)(long)(PTRACE_O_TRACESECCOMP | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE |
                          PTRACE_O_TRACEEXEC | PTRACE_O_TRACESYSGOOD));
    tracee(root, 1)->started = 1;
    ptrace(PTRACE_CONT, root, NULL, NULL);
    for (;;) {
        pid_t pid = waitpid(-1, &st, __WALL);
        if (pid < 0) { if (errno == EINTR) continue; break; } /* ECHILD: all gone */
        if (WIFEXITED(st) || WIFSIGNALED(st)) {
            forget(pid);
            if (pid == root) {
                root_status = st;
                for (size_t i = 0; i < ntrs; i++) kill(trs[i].pid, SIGKILL); /* what the verifier left */
            }
            continue;
        }
        if (!WIFSTOPPED(st)) continue;
        int sig = WSTOPSIG(st), ev = (unsigned)st >> 16, inject = 0;
        tracee_t *t = tracee(pid, 1);
        if (root_status != -1) { kill(pid, SIGKILL); ptrace(PTRACE_CONT, pid, NULL, NULL); continue; }
        if (!t->started) { /* a new child's first stop is the SIGSTOP of its attach: not delivered */
            t->started = 1;
            if (sig == SIGSTOP && !ev) { ptrace(PTRACE_CONT, pid, NULL, NULL); continue; }
        }
        if (ev == PTRACE_EVENT_SECCOMP) {
            unsigned long msg = 0;
            ptrace(PTRACE_GETEVENTMSG, pid, NULL, &msg);
            if (msg == 1) { /* another ABI: untraced by us; said once per process */
                buf_t b = {0}; bfmt(&b, "{\"e\":\"c\",\"p\":%d}", pid); emit(&b);
                ptrace(PTRACE_CONT, pid, NULL, NULL);
                continue;
            }
            on_entry(pid, t);
            ptrace(t->nr >= 0 ? PTRACE_SYSCALL : PTRACE_CONT, pid, NULL, NULL);
            continue;
        }
        if (ev == PTRACE_EVENT_EXEC) {
            unsigned long former = (unsigned long)pid;
            ptrace(PTRACE_GETEVENTMSG, pid, NULL, &former);
            on_exec(pid, (pid_t)former);
            ptrace(PTRACE_CONT, pid, NULL, NULL); /* the execve's exit stop is not needed */
            continue;
        }
        if (ev == PTRACE_EVENT_FORK || ev == PTRACE_EVENT_VFORK || ev == PTRACE_EVENT_CLONE) {
            unsigned long child = 0;
            ptrace(PTRACE_GETEVENTMSG, pid, NULL, &child);
            tracee_t *c = tracee((pid_t)child, 1);
            snprintf(c->cwd, sizeof c->cwd, "%s", t->cwd);
            buf_t b = {0}; bfmt(&b, "{\"e\":\"f\",\"p\":%lu,\"pp\":%d}", child, pid); emit(&b);
            ptrace(PTRACE_CONT, pid, NULL, NULL);
            continue;
        }
        if (sig == (SIGTRAP | 0x80)) { /* a syscall's exit, after its seccomp stop */
            on_exit_stop(pid, t);
            ptrace(PTRACE_CONT, pid, NULL, NULL);
            continue;
        }
        if (!ev && sig != SIGTRAP) inject = sig; /* a signal for the tracee: delivered */
        ptrace(PTRACE_CONT, pid, NULL, (void *)(long)inject);
    }
    buf_t b = {0};
    bfmt(&b, "{\"e\":\"end\",\"root\":%d,\"events\":%ld,\"dropped\":%ld}\n", root_status, tr_events, tr_dropped);
    bput(&tr_out, b.p, b.n);
    free(b.p);
    for (size_t off = 0; off < tr_out.n;) {
        ssize_t w = write(2, tr_out.p + off, tr_out.n - off);
        if (w <= 0) { if (errno == EINTR) continue; break; }
        off += (size_t)w;
    }
    if (root_status == -1) return 126;
    return WIFEXITED(root_status) ? WEXITSTATUS(root_status) : 128 + WTERMSIG(root_status);
#endif
}
