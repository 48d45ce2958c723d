/* The sandbox command server for images without (a usable) Python: the same JSON-lines protocol as
 * agent/sandbox_server.py, as one static binary that needs nothing from the image.
 *
 * Built by agent/sandbox_native.py (`gcc -static -O2`), bind-mounted read-only into the container and run
 * under tini as its main process. One thread around one poll(): under a fork bomb it needs no new thread or
 * process to time out, kill and answer.
 *
 * Request:  {"id": 1, "argv": [...] | "cmd": "shell text", "timeout": 30, "cap": 65536,
 *            "user": "agent"|"root"|"NAME"|"UID[:GID]", "cwd": "/app", "env": {...}, "stdin": "<base64>"}
 *           {"id": 2, "op": "snapshot", "root": "/app", "max_files": 5000, "keep": [path, ...]}
 *           {"id": 3, "op": "killall"}   kills every process but init and this server
 *           {"id": 4, "op": "mkdirs", "paths": [...], "mode": 493, "owner": "USER", "fresh": true}
 *           {"id": 5, "op": "write", "path": "/tests/test.sh", "data": "<base64>", "mode": 493, "owner": "USER"}
 *           {"id": 6, "op": "read", "path": "/logs/verifier/reward.txt", "max": 1048576}
 *           {"id": 7, "op": "remove", "paths": [...]}   {"id": 8, "op": "stat", "paths": [...]} -> "kinds"
 *           {"id": 9, "op": "symlink", "path": "/app/current", "target": "releases/v2", "owner": "USER"}
 *           The file ops are done by this server itself (as root, without any program of the image): the
 *           harness never needs the container's sh, tar or ls, whatever the agent did to them. A path
 *           component that is not a real folder (a file, a link) is replaced by one; reads follow no link.
 *           Reply {"id": N, "ok": true, ...} ({"data", "size", "truncated"} for read) or
 *           {"id": N, "ok": false, "message": "..."}.
 * Reply:    as agent/sandbox_server.py; a snapshot reply is {"id": 2, "snapshot": {path: [kind, size, hash, exec]},
 *           "not_listed": N}, with "!rejected": [reason, ...] for what could not be listed (folders over 256
 *           levels deep, unreadable entries); a link's entry is ["l", 0, its target text]. Every path in "keep"
 *           (a baseline's) is listed, and of the others the max_files first (depth, size, path): N says how
 *           many were not. Hashes are 64-bit FNV-1a (hex), not sha256: only equality between two snapshots of
 *           the same sandbox matters.
 * "agent" is the user named by --agent=USER or $HARNESS_UID (a uid, uid:gid or a name from the image's /etc/passwd).
 * Environment: "env" replaces the whole environment; "env_add" sets variables on top of the container's.
 * Either way a command without HOME gets the home folder of its user from /etc/passwd ("/" without an
 * entry), as `docker exec -u USER` does (--keep-home: the image's or the task's ENV sets HOME; keep it).
 * --procs=keep (Harbor tasks): what a command leaves running survives its end, as in a persistent shell
 * session; only a timeout kills the command's process group, and "killall" everything.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <limits.h>
#include <stddef.h>

#define MAXCMD 64

/* ------------------------------------------------------------------ growable buffer */
typedef struct { char *p; size_t n, cap; } buf_t;
static void bput(buf_t *b, const void *d, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 4096;
        while (c < b->n + n + 1) c *= 2;
        b->p = realloc(b->p, c);
        if (!b->p) _exit(99);
        b->cap = c;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void bstr(buf_t *b, const char *s) { bput(b, s, strlen(s)); }
static void bfmt(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void bfmt(buf_t *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    bput(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
static void bjson_str(buf_t *b, const char *s, size_t n) {  /* a JSON string literal; bytes >= 0x80 as \u00XX */
    bstr(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; bput(b, e, 2); }
        else if (c < 0x20 || c >= 0x7f) bfmt(b, "\\u%04x", c);
        else bput(b, &c, 1);
    }
    bstr(b, "\"");
}

/* ------------------------------------------------------------------ base64 */
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
#include "trace.c" /* `helper trace -- PROG...`: the verifier's tracer */

static void b64enc(buf_t *b, const unsigned char *d, size_t n) {
    char q[4];
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = d[i] << 16 | (i + 1 < n ? d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        q[0] = B64[v >> 18 & 63]; q[1] = B64[v >> 12 & 63];
        q[2] = i + 1 < n ? B64[v >> 6 & 63] : '=';
        q[3] = i + 2 < n ? B64[v & 63] : '=';
        bput(b, q, 4);
    }
}
static int b64val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}
static void b64dec(buf_t *out, const char *s, size_t n) {
    unsigned v = 0; int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int x = b64val((unsigned char)s[i]);
        if (x < 0) continue;
        v = v << 6 | x; bits += 6;
        if (bits >= 8) { bits -= 8; unsigned char c = v >> bits & 0xff; bput(out, &c, 1); }
    }
}

/* ------------------------------------------------------------------ a small JSON reader (requests only) */
enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
typedef struct jv { int t; double num; char *str; size_t len; struct jv *kids; char **keys; int n; } jv;
static const char *jp;
static void jws(void) { while (*jp == ' ' || *jp == '\t' || *jp == '\r' || *jp == '\n') jp++; }
static int jparse(jv *v);
static void utf8(buf_t *b, unsigned cp) {
    unsigned char o[4]; int n;
    if (cp < 0x80) { o[0] = cp; n = 1; }
    else if (cp < 0x800) { o[0] = 0xc0 | cp >> 6; o[1] = 0x80 | (cp & 63); n = 2; }
    else if (cp < 0x10000) { o[0] = 0xe0 | cp >> 12; o[1] = 0x80 | (cp >> 6 & 63); o[2] = 0x80 | (cp & 63); n = 3; }
    else { o[0] = 0xf0 | cp >> 18; o[1] = 0x80 | (cp >> 12 & 63); o[2] = 0x80 | (cp >> 6 & 63); o[3] = 0x80 | (cp & 63); n = 4; }
    bput(b, o, n);
}
static int jstring(char **out, size_t *len) {
    if (*jp != '"') return -1;
    jp++;
    buf_t b = {0};
    bput(&b, "", 0);
    while (*jp && *jp != '"') {
        if (*jp == '\\') {
            jp++;
            char c = *jp++;
            switch (c) {
            case 'n': bput(&b, "\n", 1); break;
            case 't': bput(&b, "\t", 1); break;
            case 'r': bput(&b, "\r", 1); break;
            case 'b': bput(&b, "\b", 1); break;
            case 'f': bput(&b, "\f", 1); break;
            case 'u': {
                unsigned cp = (unsigned)strtoul((char[5]){jp[0], jp[1], jp[2], jp[3], 0}, NULL, 16);
                jp += 4;
                if (cp >= 0xd800 && cp < 0xdc00 && jp[0] == '\\' && jp[1] == 'u') {
                    unsigned lo = (unsigned)strtoul((char[5]){jp[2], jp[3], jp[4], jp[5], 0}, NULL, 16);
                    jp += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                utf8(&b, cp);
                break;
            }
            default: bput(&b, &c, 1);
            }
        } else bput(&b, jp++, 1);
    }
    if (*jp != '"') { free(b.p); return -1; }
    jp++;
    *out = b.p; *len = b.n;
    return 0;
}
static int jparse(jv *v) {
    memset(v, 0, sizeof *v);
    jws();
    if (*jp == '{' || *jp == '[') {
        int obj = *jp == '{';
        char close = obj ? '}' : ']';
        v->t = obj ? J_OBJ : J_ARR;
        jp++; jws();
        int cap = 0;
        while (*jp && *jp != close) {
            if (v->n == cap) {
                cap = cap ? cap * 2 : 8;
                v->kids = realloc(v->kids, cap * sizeof(jv));
                v->keys = realloc(v->keys, cap * sizeof(char *));
            }
            v->keys[v->n] = NULL;
            if (obj) {
                size_t kl;
                jws();
                if (jstring(&v->keys[v->n], &kl)) return -1;
                jws();
                if (*jp++ != ':') return -1;
            }
            if (jparse(&v->kids[v->n])) return -1;
            v->n++;
            jws();
            if (*jp == ',') { jp++; jws(); }
        }
        if (*jp != close) return -1;
        jp++;
        return 0;
    }
    if (*jp == '"') { v->t = J_STR; return jstring(&v->str, &v->len); }
    if (!strncmp(jp, "true", 4)) { v->t = J_BOOL; v->num = 1; jp += 4; return 0; }
    if (!strncmp(jp, "false", 5)) { v->t = J_BOOL; jp += 5; return 0; }
    if (!strncmp(jp, "null", 4)) { v->t = J_NULL; jp += 4; return 0; }
    char *end;
    v->num = strtod(jp, &end);
    if (end == jp) return -1;
    v->t = J_NUM; jp = end;
    return 0;
}
static jv *jget(jv *o, const char *key) {
    if (!o || o->t != J_OBJ) return NULL;
    for (int i = 0; i < o->n; i++) if (!strcmp(o->keys[i], key)) return &o->kids[i];
    return NULL;
}
static void jfree(jv *v) {
    for (int i = 0; i < v->n; i++) { jfree(&v->kids[i]); if (v->keys) free(v->keys[i]); }
    free(v->kids); free(v->keys); free(v->str);
}

/* ------------------------------------------------------------------ output */
static void send_buf(buf_t *b) {
    bstr(b, "\n");
    size_t off = 0;
    while (off < b->n) {
        ssize_t w = write(1, b->p + off, b->n - off);
        if (w < 0) { if (errno == EINTR || errno == EAGAIN) { struct pollfd p = {1, POLLOUT, 0}; poll(&p, 1, 100); continue; } _exit(0); }
        off += (size_t)w;
    }
}
static void send_error(long id, const char *msg) {
    buf_t b = {0};
    bfmt(&b, "{\"id\": %ld, \"error\": ", id);
    bjson_str(&b, msg, strlen(msg));
    bstr(&b, "}");
    send_buf(&b);
    free(b.p);
}

/* ------------------------------------------------------------------ users */
/* uid, gid and home folder of a user spec ("root", a name, a uid or uid:gid); home "/" without a passwd
 * entry, as runc sets it. */
static int passwd_find(const char *name, long uid, uid_t *u, gid_t *g, char *home, size_t hn) {
    FILE *f = fopen("/etc/passwd", "r");
    char line[1024];
    int found = -1;
    while (f && fgets(line, sizeof line, f)) {
        char *fld[7] = {0}; int k = 0;
        line[strcspn(line, "\n")] = 0;
        for (char *s = line, *t; k < 7 && (t = strsep(&s, ":")); ) fld[k++] = t;
        if (k < 4) continue;
        if (name ? !strcmp(fld[0], name) : strtol(fld[2], NULL, 10) == uid) {
            *u = (uid_t)strtoul(fld[2], NULL, 10); *g = (gid_t)strtoul(fld[3], NULL, 10);
            if (home && k >= 6 && fld[5][0]) snprintf(home, hn, "%s", fld[5]);
            found = 0; break;
        }
    }
    if (f) fclose(f);
    return found;
}
static int lookup_user_home(const char *spec, uid_t *uid, gid_t *gid, char *home, size_t hn) {
    if (home) snprintf(home, hn, "/");
    if (!strcmp(spec, "root")) {
        *uid = 0; *gid = 0;
        uid_t u; gid_t g;
        passwd_find(NULL, 0, &u, &g, home, hn);
        return 0;
    }
    char *end;
    unsigned long u = strtoul(spec, &end, 10);
    if (*spec && end != spec && (*end == 0 || *end == ':')) {
        uid_t pu; gid_t pg = (gid_t)u;
        int found = passwd_find(NULL, (long)u, &pu, &pg, home, hn);
        *uid = (uid_t)u; *gid = found == 0 ? pg : (gid_t)u;  /* a bare uid: its passwd group when it has one */
        if (*end == ':') *gid = (gid_t)strtoul(end + 1, NULL, 10);
        return 0;
    }
    return passwd_find(spec, 0, uid, gid, home, hn);
}
static int lookup_user(const char *spec, uid_t *uid, gid_t *gid) { return lookup_user_home(spec, uid, gid, NULL, 0); }

/* ------------------------------------------------------------------ commands */
typedef struct { unsigned char *head, *tail; size_t half, hn, tn, total; } capped_t;
static void cap_init(capped_t *c, size_t cap) {
    c->half = cap / 2 ? cap / 2 : 1;
    c->head = malloc(c->half); c->tail = malloc(c->half);
    c->hn = c->tn = c->total = 0;
}
static void cap_add(capped_t *c, const unsigned char *d, size_t n) {
    c->total += n;
    size_t room = c->half - c->hn;
    if (room > 0) { size_t k = n < room ? n : room; memcpy(c->head + c->hn, d, k); c->hn += k; d += k; n -= k; }
    if (!n) return;
    if (n >= c->half) { memcpy(c->tail, d + n - c->half, c->half); c->tn = c->half; return; }
    if (c->tn + n > c->half) { size_t drop = c->tn + n - c->half; memmove(c->tail, c->tail + drop, c->tn - drop); c->tn -= drop; }
    memcpy(c->tail + c->tn, d, n); c->tn += n;
}
static void cap_fields(buf_t *b, capped_t *c, const char *pfx) {
    bfmt(b, ", \"%s_head\": \"", pfx); b64enc(b, c->head, c->hn);
    bfmt(b, "\", \"%s_tail\": \"", pfx); b64enc(b, c->tail, c->tn);
    bfmt(b, "\", \"%s_dropped\": %zu", pfx, c->total - c->hn - c->tn);
}

typedef struct {
    int used; long id; pid_t pid; int pidfd, out, err, in;
    unsigned char *stdin_data; size_t stdin_len, stdin_off;
    capped_t o, e;
    double started, deadline; int timed_out; long oom_before;
} cmd_t;
static cmd_t cmds[MAXCMD];
static int nrunning;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static long oom_kills(void) {
    const char *paths[] = {"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(paths[i], "r");
        if (!f) continue;
        char key[64]; long v;
        while (fscanf(f, "%63s %ld", key, &v) == 2) if (!strcmp(key, "oom_kill")) { fclose(f); return v; }
        fclose(f);
    }
    return -1;
}
static void reap_strays(void) {
    for (int i = 0; i < 100; i++) {
        if (kill(-1, SIGKILL) < 0) break;  /* ESRCH: nothing left to signal */
        usleep(5000);
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
}

/* The command could not start (no such folder, user or program; no process left under a fork bomb): all of
 * these the agent can cause, so they are the command's result, like a shell's 126/127, never a dead sandbox
 * (as agent/sandbox_server.py answers them). */
static void send_spawn_failure(long id, int code, const char *why) {
    capped_t o, e; cap_init(&o, 64); cap_init(&e, 4096);
    char msg[800]; int mn = snprintf(msg, sizeof msg, "cannot start the command: %s\n", why);
    cap_add(&e, (unsigned char *)msg, (size_t)(mn < (int)sizeof msg ? mn : (int)sizeof msg - 1));
    buf_t b = {0};
    bfmt(&b, "{\"id\": %ld, \"exit_code\": %d, \"duration\": 0.0, \"timed_out\": false, \"oom\": false, "
         "\"spawn_error\": true", id, code);
    cap_fields(&b, &o, "out"); cap_fields(&b, &e, "err"); bstr(&b, "}");
    send_buf(&b); free(b.p); free(o.head); free(o.tail); free(e.head); free(e.tail);
}

static char *agent_spec = "10001";
static char **base_env;
static int keep_procs;
/* keep mode: the read ends of pipes that a finished command's background processes still write to, read
 * and thrown away (a terminal would absorb that output too), so that they never die of SIGPIPE */
#define MAXORPHAN 128
static int orphans[MAXORPHAN];
static int norphans;
static void adopt(int fd) {
    if (fd < 0) return;
    if (norphans == MAXORPHAN) { close(orphans[0]); memmove(orphans, orphans + 1, (MAXORPHAN - 1) * sizeof(int)); norphans--; }
    orphans[norphans++] = fd;
}
static void drop_orphans(void) { for (int i = 0; i < norphans; i++) close(orphans[i]); norphans = 0; }

/* A command's environment: "env" (the whole of it) or the container's with "env_add" on top; HOME from the
 * user's passwd entry when none is set, as `docker exec` gives it. Every string is the caller's to free. */
static int keep_home;
static char **build_env(jv *env_v, jv *add_v, const char *home) {
    int n = 0;
    for (char **e = base_env; *e; e++) n++;
    int extra = (env_v && env_v->t == J_OBJ ? env_v->n : 0) + (add_v && add_v->t == J_OBJ ? add_v->n : 0);
    char **envp = calloc(n + extra + 2, sizeof(char *));
    int k = 0;
    jv *sets[2] = {NULL, NULL};
    if (env_v && env_v->t == J_OBJ && env_v->n > 0) sets[0] = env_v;
    else {
        for (char **e = base_env; *e; e++) envp[k++] = strdup(*e);
        if (add_v && add_v->t == J_OBJ) sets[1] = add_v;
    }
    for (int s = 0; s < 2; s++) {
        jv *o = sets[s];
        if (!o) continue;
        for (int i = 0; i < o->n; i++) {
            const char *key = o->keys[i], *val = o->kids[i].str ? o->kids[i].str : "";
            size_t kl = strlen(key);
            char *item = malloc(kl + strlen(val) + 2);
            sprintf(item, "%s=%s", key, val);
            int j = 0;
            for (; j < k; j++) if (!strncmp(envp[j], key, kl) && envp[j][kl] == '=') break;
            if (j < k) { free(envp[j]); envp[j] = item; } else envp[k++] = item;
        }
    }
    int has_home = 0;
    for (int j = 0; j < k; j++) if (!strncmp(envp[j], "HOME=", 5)) has_home = 1;
    if (!has_home) {
        envp[k] = malloc(strlen(home) + 6);
        sprintf(envp[k++], "HOME=%s", home);
    }
    envp[k] = NULL;
    return envp;
}

static void start_cmd(jv *req, long id) {
    int slot = -1;
    for (int i = 0; i < MAXCMD; i++) if (!cmds[i].used) { slot = i; break; }
    if (slot < 0) { send_spawn_failure(id, 126, "too many commands at once"); return; }
    jv *argv_v = jget(req, "argv"), *cmd_v = jget(req, "cmd"), *env_v = jget(req, "env");
    jv *user_v = jget(req, "user"), *cwd_v = jget(req, "cwd"), *stdin_v = jget(req, "stdin");
    jv *to_v = jget(req, "timeout"), *cap_v = jget(req, "cap");
    char **argv;
    if (argv_v && argv_v->t == J_ARR && argv_v->n > 0) {
        argv = calloc(argv_v->n + 1, sizeof(char *));
        for (int i = 0; i < argv_v->n; i++) argv[i] = argv_v->kids[i].str ? argv_v->kids[i].str : "";
    } else if (cmd_v && cmd_v->t == J_STR) {
        argv = calloc(4, sizeof(char *));
        argv[0] = "/bin/bash"; argv[1] = "-c"; argv[2] = cmd_v->str;
        if (access("/bin/bash", X_OK) != 0) argv[0] = "/bin/sh";
    } else { send_spawn_failure(id, 126, "no argv or cmd"); return; }
    const char *user = user_v && user_v->t == J_STR ? user_v->str : "agent";
    uid_t uid = 0; gid_t gid = 0;
    char home[1024];
    const char *who = strcmp(user, "agent") ? user : agent_spec;
    if (lookup_user_home(who, &uid, &gid, home, sizeof home) != 0) {
        char msg[300]; snprintf(msg, sizeof msg, "no user %s in /etc/passwd", who);
        send_spawn_failure(id, 126, msg); free(argv); return;
    }
    char **envp = build_env(env_v, jget(req, "env_add"), home);
    const char *cwd = cwd_v && cwd_v->t == J_STR ? cwd_v->str : "/";
    buf_t in = {0};
    int has_stdin = stdin_v && stdin_v->t == J_STR && stdin_v->len > 0;
    if (has_stdin) b64dec(&in, stdin_v->str, stdin_v->len);

    int po[2], pe[2], pi[2] = {-1, -1}, perr[2];
    if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) || (has_stdin && pipe2(pi, O_CLOEXEC)) || pipe2(perr, O_CLOEXEC)) {
        send_spawn_failure(id, 126, "pipe: too many open files"); free(argv); free(in.p); return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        sigset_t none; sigemptyset(&none); sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(has_stdin ? pi[0] : devnull, 0);
        dup2(po[1], 1); dup2(pe[1], 2);
        const char *step = "chdir";
        if (chdir(cwd) == 0) {
            step = "setgroups";
            if (uid == 0 || setgroups(0, NULL) == 0) {
                step = "setgid";
                if (uid == 0 || setgid(gid) == 0) {
                    step = "setuid";
                    if (uid == 0 || setuid(uid) == 0) {
                        step = "exec";
                        /* PATH lookup with the command's own PATH, as Python's Popen does */
                        for (char **e = envp; *e; e++) if (!strncmp(*e, "PATH=", 5)) { setenv("PATH", *e + 5, 1); break; }
                        execvpe(argv[0], argv, envp);
                    }
                }
            }
        }
        char msg[600];
        int n = snprintf(msg, sizeof msg, "%s %s: %s", step, !strcmp(step, "chdir") ? cwd : argv[0], strerror(errno));
        if (write(perr[1], msg, n) < 0) {}
        _exit(127);
    }
    close(po[1]); close(pe[1]); close(perr[1]);
    if (has_stdin) close(pi[0]);
    for (char **e = envp; *e; e++) free(*e);
    free(envp);
    free(argv);
    if (pid < 0) {
        char msg[200]; snprintf(msg, sizeof msg, "fork: %s", strerror(errno));
        close(po[0]); close(pe[0]); close(perr[0]); if (has_stdin) close(pi[1]);
        send_spawn_failure(id, 126, msg); free(in.p); return;
    }
    char emsg[600]; ssize_t en = read(perr[0], emsg, sizeof emsg - 1);
    close(perr[0]);
    if (en > 0) {  /* the child could not start the command: as Popen raising */
        emsg[en] = 0;
        waitpid(pid, NULL, 0);
        close(po[0]); close(pe[0]); if (has_stdin) close(pi[1]);
        send_spawn_failure(id, strstr(emsg, "No such file") && !strncmp(emsg, "exec", 4) ? 127 : 126, emsg);
        free(in.p); return;
    }
    cmd_t *c = &cmds[slot];
    memset(c, 0, sizeof *c);
    c->used = 1; c->id = id; c->pid = pid;
    c->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    c->out = po[0]; c->err = pe[0]; c->in = has_stdin ? pi[1] : -1;
    fcntl(c->out, F_SETFL, O_NONBLOCK); fcntl(c->err, F_SETFL, O_NONBLOCK);
    if (c->in >= 0) fcntl(c->in, F_SETFL, O_NONBLOCK);
    c->stdin_data = (unsigned char *)in.p; c->stdin_len = in.n;
    size_t cap = cap_v && cap_v->t == J_NUM ? (size_t)cap_v->num : 65536;
    cap_init(&c->o, cap); cap_init(&c->e, cap);
    c->started = now();
    c->deadline = c->started + (to_v && to_v->t == J_NUM ? to_v->num : 60.0);
    c->oom_before = oom_kills();
    nrunning++;
}

static void drain(int fd, capped_t *c) {
    unsigned char tmp[65536];
    for (;;) {
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r > 0) cap_add(c, tmp, (size_t)r);
        else break;
    }
}

static void finish_cmd(cmd_t *c) {
    int status = 0;
    if (!keep_procs || c->timed_out) kill(-c->pid, SIGKILL);  /* its whole group, also what it left in the background */
    waitpid(c->pid, &status, 0);
    nrunning--;
    if (!nrunning && !keep_procs) reap_strays();  /* processes that escaped the group (setsid, daemons) */
    drain(c->out, &c->o); drain(c->err, &c->e);
    if (keep_procs && !c->timed_out) {
        if (c->out >= 0) adopt(c->out);
        if (c->err >= 0) adopt(c->err);
    } else {
        if (c->out >= 0) close(c->out);
        if (c->err >= 0) close(c->err);
    }
    if (c->in >= 0) close(c->in);
    if (c->pidfd >= 0) close(c->pidfd);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
    long oom = oom_kills();
    buf_t b = {0};
    bfmt(&b, "{\"id\": %ld, \"exit_code\": %d, \"duration\": %.6f, \"timed_out\": %s, \"oom\": %s", c->id, code,
         now() - c->started, c->timed_out ? "true" : "false", c->oom_before >= 0 && oom > c->oom_before ? "true" : "false");
    cap_fields(&b, &c->o, "out");
    cap_fields(&b, &c->e, "err");
    bstr(&b, "}");
    send_buf(&b);
    free(b.p);
    free(c->o.head); free(c->o.tail); free(c->e.head); free(c->e.tail); free(c->stdin_data);
    c->used = 0;
}

/* ------------------------------------------------------------------ snapshot (change capture) */
/* As agent/sandbox/capture.py: every step relative to an open folder (openat/fstatat, no link followed), no
 * recursion and no path buffer, so paths of any length are listed (agent.sandbox.changes.unwritable then
 * decides what a container can hold) and folders deeper than WALK_DEPTH are listed as not captured
 * ("!rejected" in the reply): what the agent makes in its workspace never ends this server. */
#define WALK_DEPTH 256
typedef struct { int depth; long long size; char *rel; buf_t json; } other_t;  /* an entry not in keep, as JSON */
typedef struct {
    buf_t *b, rej, rel; long max; int first, at_root; dev_t dev;
    char **keep; int nkeep;  /* a baseline's paths, sorted: always listed (a changed starting file is never cut) */
    other_t *others; long nothers, cap, dropped;  /* the max first others; how many were cut */
    int bounded, bdepth; long long bsize; const char *brel;  /* once cut: the last kept (anything after it is dropped) */
} walk_t;
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int depth_of(const char *rel) { int n = 0; for (; *rel; rel++) n += *rel == '/'; return n; }
/* shallowest, then smallest, then by path (as capture.py): an answer sits near the top, a dependency
 * folder's thousands of files lie deeper */
static int cmp_key(int d1, long long s1, const char *r1, int d2, long long s2, const char *r2) {
    if (d1 != d2) return d1 < d2 ? -1 : 1;
    if (s1 != s2) return s1 < s2 ? -1 : 1;
    return strcmp(r1, r2);
}
static int cmp_other(const void *a, const void *b) {
    const other_t *x = a, *y = b;
    return cmp_key(x->depth, x->size, x->rel, y->depth, y->size, y->rel);
}
/* Back to the max first others, as capture.py: memory stays bounded whatever the workspace holds. */
static void cut_others(walk_t *w) {
    qsort(w->others, w->nothers, sizeof *w->others, cmp_other);
    for (long i = w->max; i < w->nothers; i++) { free(w->others[i].rel); free(w->others[i].json.p); w->dropped++; }
    if (w->nothers > w->max) w->nothers = w->max;
    w->bounded = 1;
    w->bdepth = w->nothers ? w->others[w->nothers - 1].depth : -1;
    w->bsize = w->nothers ? w->others[w->nothers - 1].size : -1;
    w->brel = w->nothers ? w->others[w->nothers - 1].rel : "";
}
/* A path as this server lists it (bytes >= 0x80 as \u00XX), read back by jstring as UTF-8: its bytes again. */
static char *path_bytes(const char *s) {
    char *out = malloc(strlen(s) + 1), *o = out;
    if (!out) _exit(99);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        if ((p[0] & 0xe0) == 0xc0 && (p[1] & 0xc0) == 0x80) { *o++ = (char)((p[0] & 0x1f) << 6 | (p[1] & 0x3f)); p += 2; }
        else *o++ = (char)*p++;
    }
    *o = 0;
    return out;
}
static uint64_t fnv_file(int dirfd, const char *name, int *ok) {
    uint64_t h = 1469598103934665603ULL;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    *ok = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (!*ok) { if (fd >= 0) close(fd); return 0; }
    unsigned char tmp[1 << 16];
    ssize_t r;
    while ((r = read(fd, tmp, sizeof tmp)) > 0)
        for (ssize_t i = 0; i < r; i++) { h ^= tmp[i]; h *= 1099511628211ULL; }
    if (r < 0) *ok = 0;
    close(fd);
    return h;
}
static void walk_reject(walk_t *w, const char *what, const char *tail) {  /* "WHAT REL TAIL", long paths cut */
    buf_t m = {0};
    const char *rel = w->rel.n ? w->rel.p : ".";
    size_t n = strlen(rel);
    bstr(&m, what);
    bstr(&m, " ");
    if (n <= 160) bput(&m, rel, n);
    else { bput(&m, rel, 70); bstr(&m, "..."); bput(&m, rel + n - 70, 70); }
    if (tail) { bstr(&m, " "); bstr(&m, tail); }
    if (w->rej.n) bstr(&w->rej, ", ");
    bjson_str(&w->rej, m.p, m.n);
    free(m.p);
}
static void walk_error(walk_t *w, const char *what) {
    char tail[128]; snprintf(tail, sizeof tail, "(%s)", strerror(errno));
    walk_reject(w, what, tail);
}
static void walk(walk_t *w, int topfd) {
    struct { DIR *d; size_t len; } st[WALK_DEPTH + 1];
    int top = 0;
    st[0].d = fdopendir(topfd);
    st[0].len = 0;
    if (!st[0].d) { close(topfd); return; }
    while (top >= 0) {
        DIR *d = st[top].d;
        w->rel.n = st[top].len;
        if (w->rel.p) w->rel.p[w->rel.n] = 0;
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) walk_error(w, "unreadable folder");
            closedir(d);
            top--;
            continue;
        }
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (w->at_root && top == 0 && !strcmp(de->d_name, ".harness-helper")) continue;
        if (w->rel.n) bstr(&w->rel, "/");
        bstr(&w->rel, de->d_name);
        struct stat sb;
        if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW)) { walk_error(w, "unreadable entry"); continue; }
        if (S_ISDIR(sb.st_mode)) {
            if (sb.st_dev != w->dev) continue;  /* other filesystems: /proc, /sys, tmpfs */
            if (top + 1 >= WALK_DEPTH) {
                char tail[64]; snprintf(tail, sizeof tail, "is more than %d levels deep", WALK_DEPTH);
                walk_reject(w, "folder", tail);  /* as capture.py says it */
                continue;
            }
            int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            DIR *sub = fd >= 0 ? fdopendir(fd) : NULL;
            if (!sub) {
                walk_error(w, "unreadable folder");
                if (fd >= 0) close(fd);
                continue;
            }
            top++;
            st[top].d = sub;
            st[top].len = w->rel.n;
            continue;
        }
        long long size = S_ISREG(sb.st_mode) ? (long long)sb.st_size : 0;
        int kept = w->nkeep && bsearch(&w->rel.p, w->keep, w->nkeep, sizeof *w->keep, cmp_str);
        int depth = depth_of(w->rel.p);
        if (!kept && w->bounded && cmp_key(depth, size, w->rel.p, w->bdepth, w->bsize, w->brel) > 0) {
            w->dropped++;  /* past the cap and larger than all kept: not even read */
            continue;
        }
        buf_t e = {0};
        bjson_str(&e, w->rel.p, w->rel.n);
        if (S_ISLNK(sb.st_mode)) {
            char target[4096]; ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof target - 1);
            bstr(&e, ": [\"l\", 0, ");
            bjson_str(&e, target, n > 0 ? (size_t)n : 0);
            bstr(&e, "]");
        } else if (S_ISREG(sb.st_mode)) {
            int ok;
            uint64_t h = fnv_file(dirfd(d), de->d_name, &ok);
            if (ok) bfmt(&e, ": [\"f\", %lld, \"%016llx\", %s]", (long long)sb.st_size, (unsigned long long)h,
                         sb.st_mode & 0111 ? "true" : "false");
            else { bfmt(&e, ": [\"o\", %lld, \"\"]", (long long)sb.st_size); walk_reject(w, "unreadable file", NULL); }
        } else bstr(&e, ": [\"o\", 0, \"\"]");
        if (kept) {
            if (!w->first) bstr(w->b, ", ");
            w->first = 0;
            bput(w->b, e.p, e.n);
            free(e.p);
            continue;
        }
        if (w->nothers == w->cap) {
            w->cap = w->cap ? 2 * w->cap : 64;
            w->others = realloc(w->others, w->cap * sizeof *w->others);
            if (!w->others) _exit(99);
        }
        w->others[w->nothers++] = (other_t){depth, size, strdup(w->rel.p), e};
        if (w->nothers >= 2 * w->max + 1) cut_others(w);  /* at most twice the cap held */
    }
}
static void snapshot(jv *req, long id) {
    jv *root_v = jget(req, "root"), *max_v = jget(req, "max_files");
    const char *root = root_v && root_v->t == J_STR ? root_v->str : "/";
    buf_t b = {0}, items = {0};
    bput(&items, "", 0);
    jv *keep_v = jget(req, "keep");
    walk_t w = {.b = &items, .max = max_v && max_v->t == J_NUM ? (long)max_v->num : 5000, .first = 1,
                .at_root = !strcmp(root, "/")};
    if (w.max < 0) w.max = 0;
    if (keep_v && keep_v->t == J_ARR && keep_v->n) {
        w.keep = calloc(keep_v->n, sizeof *w.keep);
        if (!w.keep) _exit(99);
        for (int i = 0; i < keep_v->n; i++)
            if (keep_v->kids[i].t == J_STR) w.keep[w.nkeep++] = path_bytes(keep_v->kids[i].str);
        qsort(w.keep, w.nkeep, sizeof *w.keep, cmp_str);
    }
    bput(&w.rej, "", 0);
    bput(&w.rel, "", 0);
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat rst;
    if (fd >= 0 && fstat(fd, &rst) == 0) {
        w.dev = rst.st_dev;
        walk(&w, fd);
    } else if (fd >= 0) close(fd);
    if (w.nothers > w.max) cut_others(&w);
    for (long i = 0; i < w.nothers; i++) {
        if (!w.first) bstr(&items, ", ");
        w.first = 0;
        bput(&items, w.others[i].json.p, w.others[i].json.n);
        free(w.others[i].json.p); free(w.others[i].rel);
    }
    bfmt(&b, "{\"id\": %ld, \"not_listed\": %ld, \"snapshot\": {", id, w.dropped);
    bput(&b, items.p, items.n);
    if (w.rej.n) { bstr(&b, w.first ? "" : ", "); bstr(&b, "\"!rejected\": ["); bput(&b, w.rej.p, w.rej.n); bstr(&b, "]"); }
    bstr(&b, "}}");
    send_buf(&b);
    for (int i = 0; i < w.nkeep; i++) free(w.keep[i]);
    free(w.keep); free(w.others);
    free(b.p); free(items.p); free(w.rej.p); free(w.rel.p);
}

/* ------------------------------------------------------------------ file ops (done here, no program of the image) */
static void send_op_error(long id, const char *what, const char *path) {  /* "WHAT PATH: ERROR", long paths cut */
    const char *err = strerror(errno);
    buf_t m = {0}, b = {0};
    size_t n = strlen(path);
    bstr(&m, what); bstr(&m, " ");
    if (n <= 400) bput(&m, path, n);
    else { bput(&m, path, 190); bstr(&m, "..."); bput(&m, path + n - 190, 190); }
    bstr(&m, ": "); bstr(&m, err);
    bfmt(&b, "{\"id\": %ld, \"ok\": false, \"message\": ", id);
    bjson_str(&b, m.p, m.n);
    bstr(&b, "}");
    send_buf(&b); free(b.p); free(m.p);
}
static void send_ok(long id) { buf_t b = {0}; bfmt(&b, "{\"id\": %ld, \"ok\": true}", id); send_buf(&b); free(b.p); }

/* Removes a file, or a folder with all it holds, following no link. No recursion and two folders open at
 * most (a parent is reopened by "..", checked to be the folder it was): a tree deeper than any stack or fd
 * limit is the agent's doing and is removed too. Stops at the first folder it cannot remove. */
typedef struct { dev_t dev; ino_t ino; char *name; } rmlevel_t;
static int remove_at(int parent, const char *name) {
    if (unlinkat(parent, name, 0) == 0 || errno == ENOENT) return 0;
    if (errno != EISDIR && errno != EPERM) return -1;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) { if (fd >= 0) close(fd); return -1; }
    size_t n = 1, cap = 16;
    rmlevel_t *lv = malloc(cap * sizeof *lv);
    if (!lv) _exit(99);
    lv[0] = (rmlevel_t){st.st_dev, st.st_ino, strdup(name)};
    DIR *d = fdopendir(fd);
    int rc = 0, err = 0;
    while (d) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (de) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            if (unlinkat(dirfd(d), de->d_name, 0) == 0 || errno == ENOENT) continue;
            if (errno != EISDIR && errno != EPERM) { rc = -1; err = errno; continue; }
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0 || fstat(sub, &st)) { rc = -1; err = errno; if (sub >= 0) close(sub); continue; }
            if (n == cap) { cap *= 2; lv = realloc(lv, cap * sizeof *lv); if (!lv) _exit(99); }
            lv[n++] = (rmlevel_t){st.st_dev, st.st_ino, strdup(de->d_name)};
            closedir(d);
            d = fdopendir(sub);
            continue;
        }
        if (errno) { rc = -1; err = errno; }
        int up = n > 1 ? openat(dirfd(d), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : parent;
        closedir(d);
        d = NULL;
        if (n > 1 && (up < 0 || fstat(up, &st) || st.st_dev != lv[n - 2].dev || st.st_ino != lv[n - 2].ino)) {
            rc = -1; err = ESTALE;  /* moved meanwhile: stop rather than remove elsewhere */
            if (up >= 0) close(up);
            break;
        }
        if (unlinkat(up, lv[n - 1].name, AT_REMOVEDIR) && errno != ENOENT) {
            rc = -1; err = errno;
            if (n > 1) close(up);
            break;
        }
        free(lv[--n].name);
        if (n) d = fdopendir(up);
    }
    if (d) closedir(d);
    while (n) free(lv[--n].name);
    free(lv);
    if (rc) errno = err;
    return rc;
}
/* Every component of an absolute path made a real folder: a missing one is created (owned by uid:gid, mode),
 * one that is a file or a link is replaced. With fresh, the last one is emptied first. */
static int ensure_dir(const char *path, mode_t mode, uid_t uid, gid_t gid, int fresh, int owned_parents) {
    char p[4096];
    if (path[0] != '/') { errno = EINVAL; return -1; }
    if (strlen(path) >= sizeof p) { errno = ENAMETOOLONG; return -1; }
    snprintf(p, sizeof p, "%s", path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i]; p[i] = 0;
        struct stat st;
        int last = i == n;
        /* A process still running beside it (Harbor's shared mode) may write into the folder as it is
         * emptied: the folder is then not empty at its rmdir; empty it again (the verifier is set up, or
         * fails with ENOTEMPTY after a hundred tries) */
        for (int tries = 0; last && fresh && lstat(p, &st) == 0 && remove_at(AT_FDCWD, p); tries++)
            if (errno != ENOTEMPTY || tries == 99) return -1;
        if (lstat(p, &st) == 0 && !S_ISDIR(st.st_mode) && remove_at(AT_FDCWD, p)) return -1;
        mode_t m = last ? mode : 0755;
        uid_t u = last || owned_parents ? uid : 0;
        gid_t g = last || owned_parents ? gid : 0;
        if (lstat(p, &st) != 0) {
            if (mkdir(p, m) && errno != EEXIST) return -1;
            if (chown(p, u, g) || chmod(p, m)) return -1;
        } else if (last && !owned_parents && (chown(p, u, g) || chmod(p, m))) return -1;
        p[i] = c;
    }
    return 0;
}
static int owner_of(jv *req, uid_t *uid, gid_t *gid) {
    jv *o = jget(req, "owner");
    *uid = 0; *gid = 0;
    if (!o || o->t != J_STR) return 0;
    const char *who = strcmp(o->str, "agent") ? o->str : agent_spec;
    return lookup_user(who, uid, gid);
}
static void op_mkdirs(jv *req, long id) {
    jv *paths = jget(req, "paths"), *mode_v = jget(req, "mode"), *fresh_v = jget(req, "fresh");
    uid_t uid; gid_t gid;
    if (owner_of(req, &uid, &gid)) { errno = ESRCH; send_op_error(id, "owner", "not in /etc/passwd"); return; }
    mode_t mode = mode_v && mode_v->t == J_NUM ? (mode_t)mode_v->num : 0755;
    for (int i = 0; paths && paths->t == J_ARR && i < paths->n; i++) {
        const char *path = paths->kids[i].str ? paths->kids[i].str : "";
        if (ensure_dir(path, mode, uid, gid, fresh_v && fresh_v->num, 0)) { send_op_error(id, "mkdir", path); return; }
    }
    send_ok(id);
}
static void op_write(jv *req, long id) {
    jv *path_v = jget(req, "path"), *data_v = jget(req, "data"), *mode_v = jget(req, "mode");
    const char *path = path_v && path_v->t == J_STR ? path_v->str : "";
    uid_t uid; gid_t gid;
    if (owner_of(req, &uid, &gid)) { errno = ESRCH; send_op_error(id, "owner", "not in /etc/passwd"); return; }
    char parent[4096];
    if (strlen(path) >= sizeof parent) { errno = ENAMETOOLONG; send_op_error(id, "write", path); return; }  /* never a cut path */
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (path[0] != '/' || !slash || !slash[1]) { errno = EINVAL; send_op_error(id, "write", path); return; }
    *slash = 0;
    if (parent[0] && ensure_dir(parent, 0755, uid, gid, 0, 1)) { send_op_error(id, "mkdir", parent); return; }
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && remove_at(AT_FDCWD, path)) { send_op_error(id, "replace", path); return; }
    mode_t mode = mode_v && mode_v->t == J_NUM ? (mode_t)mode_v->num : 0644;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) { send_op_error(id, "open", path); return; }
    buf_t data = {0};
    bput(&data, "", 0);
    if (data_v && data_v->t == J_STR) b64dec(&data, data_v->str, data_v->len);
    size_t off = 0;
    int bad = fchown(fd, uid, gid) || fchmod(fd, mode);
    while (!bad && off < data.n) {
        ssize_t w = write(fd, data.p + off, data.n - off);
        if (w < 0) { if (errno == EINTR) continue; bad = 1; break; }
        off += (size_t)w;
    }
    if (!bad && close(fd)) bad = 1; else if (bad) { int e = errno; close(fd); errno = e; }
    free(data.p);
    if (bad) { send_op_error(id, "write", path); return; }
    send_ok(id);
}
/* A link at path with the target text as it is (never resolved here: what the verifier reads through it is
 * the tamper rule's to judge); whatever was at path is replaced, parents made as for write. */
static void op_symlink(jv *req, long id) {
    jv *path_v = jget(req, "path"), *target_v = jget(req, "target");
    const char *path = path_v && path_v->t == J_STR ? path_v->str : "";
    const char *target = target_v && target_v->t == J_STR ? target_v->str : "";
    uid_t uid; gid_t gid;
    if (owner_of(req, &uid, &gid)) { errno = ESRCH; send_op_error(id, "owner", "not in /etc/passwd"); return; }
    char parent[4096];
    if (strlen(path) >= sizeof parent) { errno = ENAMETOOLONG; send_op_error(id, "symlink", path); return; }
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (path[0] != '/' || !slash || !slash[1] || !target[0]) { errno = EINVAL; send_op_error(id, "symlink", path); return; }
    *slash = 0;
    if (parent[0] && ensure_dir(parent, 0755, uid, gid, 0, 1)) { send_op_error(id, "mkdir", parent); return; }
    if (remove_at(AT_FDCWD, path)) { send_op_error(id, "replace", path); return; }
    char *text = path_bytes(target);  /* the target's bytes as the snapshot listed them */
    int bad = symlink(text, path) || lchown(path, uid, gid);
    free(text);
    if (bad) { send_op_error(id, "symlink", path); return; }
    send_ok(id);
}
/* openat2 with RESOLVE_NO_SYMLINKS where the kernel has it (5.6+); else O_NOFOLLOW on the last component */
struct open_how_ { uint64_t flags, mode, resolve; };
static int open_nolinks(const char *path) {
#ifdef SYS_openat2
    struct open_how_ how = {O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */ | 0x02 /* NO_MAGICLINKS */};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    if (fd >= 0 || errno != ENOSYS) return fd;
#endif
    return open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}
static void op_read(jv *req, long id) {
    jv *path_v = jget(req, "path"), *max_v = jget(req, "max");
    const char *path = path_v && path_v->t == J_STR ? path_v->str : "";
    size_t max = max_v && max_v->t == J_NUM ? (size_t)max_v->num : (1 << 20);
    int fd = open_nolinks(path);
    if (fd < 0) { send_op_error(id, "open", path); return; }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { close(fd); errno = EINVAL; send_op_error(id, "not a regular file:", path); return; }
    buf_t data = {0};
    bput(&data, "", 0);
    unsigned char tmp[65536];
    while (data.n < max) {
        size_t want = max - data.n < sizeof tmp ? max - data.n : sizeof tmp;
        ssize_t r = read(fd, tmp, want);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        bput(&data, tmp, (size_t)r);
    }
    int more = 0;
    if (data.n >= max) { ssize_t r = read(fd, tmp, 1); more = r > 0; }
    close(fd);
    buf_t b = {0};
    bfmt(&b, "{\"id\": %ld, \"ok\": true, \"size\": %lld, \"truncated\": %s, \"data\": \"", id, (long long)st.st_size, more ? "true" : "false");
    b64enc(&b, (unsigned char *)data.p, data.n);
    bstr(&b, "\"}");
    send_buf(&b); free(b.p); free(data.p);
}

static void op_remove(jv *req, long id) {
    jv *paths = jget(req, "paths");
    for (int i = 0; paths && paths->t == J_ARR && i < paths->n; i++) {
        const char *path = paths->kids[i].str ? paths->kids[i].str : "";
        if (path[0] != '/') { errno = EINVAL; send_op_error(id, "remove", path); return; }
        if (remove_at(AT_FDCWD, path)) { send_op_error(id, "remove", path); return; }
    }
    send_ok(id);
}
static void op_stat(jv *req, long id) {  /* kinds: f file, d folder, l link, o other, "" none */
    jv *paths = jget(req, "paths");
    buf_t b = {0};
    bfmt(&b, "{\"id\": %ld, \"ok\": true, \"kinds\": [", id);
    for (int i = 0; paths && paths->t == J_ARR && i < paths->n; i++) {
        struct stat st;
        const char *k = "";
        if (paths->kids[i].str && lstat(paths->kids[i].str, &st) == 0)
            k = S_ISREG(st.st_mode) ? "f" : S_ISDIR(st.st_mode) ? "d" : S_ISLNK(st.st_mode) ? "l" : "o";
        bfmt(&b, "%s\"%s\"", i ? ", " : "", k);
    }
    bstr(&b, "]}");
    send_buf(&b); free(b.p);
}

/* ------------------------------------------------------------------ main loop */
static void handle_line(char *line) {
    jv req;
    jp = line;
    if (jparse(&req) || req.t != J_OBJ) { send_error(-1, "bad request"); jfree(&req); return; }
    jv *id_v = jget(&req, "id"), *op_v = jget(&req, "op");
    long id = id_v && id_v->t == J_NUM ? (long)id_v->num : -1;
    const char *op = op_v && op_v->t == J_STR ? op_v->str : "";
    if (!strcmp(op, "snapshot")) snapshot(&req, id);
    else if (!strcmp(op, "mkdirs")) op_mkdirs(&req, id);
    else if (!strcmp(op, "write")) op_write(&req, id);
    else if (!strcmp(op, "symlink")) op_symlink(&req, id);
    else if (!strcmp(op, "read")) op_read(&req, id);
    else if (!strcmp(op, "remove")) op_remove(&req, id);
    else if (!strcmp(op, "stat")) op_stat(&req, id);
    else if (op_v && op_v->t == J_STR && !strcmp(op_v->str, "killall")) {
        for (int i = 0; i < MAXCMD; i++) if (cmds[i].used) { cmds[i].timed_out = 1; kill(-cmds[i].pid, SIGKILL); }
        reap_strays();
        drop_orphans();
        buf_t b = {0}; bfmt(&b, "{\"id\": %ld, \"killed\": true}", id); send_buf(&b); free(b.p);
    } else start_cmd(&req, id);
    jfree(&req);
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "trace")) {
        int i = argc > 2 && !strcmp(argv[2], "--") ? 3 : 2;
        return trace_main(argc - i, argv + i);
    }
    signal(SIGPIPE, SIG_IGN);
    const char *spec = getenv("HARNESS_UID");
    if (spec && *spec) agent_spec = strdup(spec);
    /* settings as arguments (--agent=USER --procs=keep --keep-home), so that the container's environment is
     * exactly the image's and the task's */
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--agent=", 8)) agent_spec = argv[i] + 8;
        else if (!strcmp(argv[i], "--procs=keep")) keep_procs = 1;
        else if (!strcmp(argv[i], "--keep-home")) keep_home = 1;
    }
    /* commands inherit the container's environment without our own variables */
    int n = 0;
    extern char **environ;
    for (char **e = environ; *e; e++) n++;
    base_env = calloc(n + 1, sizeof(char *));
    n = 0;
    for (char **e = environ; *e; e++) {
        if (!strncmp(*e, "HARNESS_", 8)) continue;
        if (!keep_home && !strncmp(*e, "HOME=", 5)) continue;  /* runc's, for our own user: not the image's */
        base_env[n++] = *e;
    }
    fcntl(0, F_SETFL, O_NONBLOCK);
    buf_t b = {0};
    bfmt(&b, "{\"id\": 0, \"ready\": true, \"pid\": %d, \"server\": \"native\"}", getpid());
    send_buf(&b); free(b.p);
    buf_t pending = {0};
    struct pollfd fds[1 + 4 * MAXCMD + MAXORPHAN];
    struct { cmd_t *c; int what; } map[1 + 4 * MAXCMD + MAXORPHAN];  /* what: 0 out, 1 err, 2 exit, 3 stdin, 4 orphan */
    for (;;) {
        double t = now(), wait = 3600;
        for (int i = 0; i < MAXCMD; i++) {
            cmd_t *c = &cmds[i];
            if (!c->used || c->timed_out) continue;
            if (c->deadline <= t) { c->timed_out = 1; kill(-c->pid, SIGKILL); }
            else if (c->deadline - t < wait) wait = c->deadline - t;
        }
        int nf = 0;
        fds[nf].fd = 0; fds[nf].events = POLLIN; map[nf].c = NULL; nf++;
        for (int i = 0; i < MAXCMD; i++) {
            cmd_t *c = &cmds[i];
            if (!c->used) continue;
            if (c->out >= 0) { fds[nf].fd = c->out; fds[nf].events = POLLIN; map[nf].c = c; map[nf].what = 0; nf++; }
            if (c->err >= 0) { fds[nf].fd = c->err; fds[nf].events = POLLIN; map[nf].c = c; map[nf].what = 1; nf++; }
            fds[nf].fd = c->pidfd; fds[nf].events = POLLIN; map[nf].c = c; map[nf].what = 2; nf++;
            if (c->in >= 0) { fds[nf].fd = c->in; fds[nf].events = POLLOUT; map[nf].c = c; map[nf].what = 3; nf++; }
        }
        int first_orphan = nf;
        for (int i = 0; i < norphans; i++) { fds[nf].fd = orphans[i]; fds[nf].events = POLLIN; map[nf].c = NULL; map[nf].what = 4; nf++; }
        int r = poll(fds, nf, (int)(wait * 1000) + 1);
        if (r < 0) { if (errno == EINTR) continue; return 1; }
        if (r < 0) continue;
        int gone = 0;
        for (int k = first_orphan; k < nf; k++) {  /* read and dropped; closed at EOF */
            if (!fds[k].revents) continue;
            char tmp[65536];
            ssize_t got = read(fds[k].fd, tmp, sizeof tmp);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                for (int i = 0; i < norphans; i++) if (orphans[i] == fds[k].fd) { close(orphans[i]); orphans[i] = -1; gone = 1; }
            }
        }
        if (gone) { int m = 0; for (int i = 0; i < norphans; i++) if (orphans[i] >= 0) orphans[m++] = orphans[i]; norphans = m; }
        nf = first_orphan;
        for (int k = 0; k < nf; k++) {
            if (!fds[k].revents) continue;
            cmd_t *c = map[k].c;
            if (!c) {
                char tmp[1 << 16];
                ssize_t got = read(0, tmp, sizeof tmp);
                if (got == 0) return 0;  /* the host went away */
                if (got < 0) continue;
                bput(&pending, tmp, (size_t)got);
                char *nl;
                while ((nl = memchr(pending.p, '\n', pending.n))) {
                    *nl = 0;
                    size_t used = (size_t)(nl - pending.p) + 1;
                    char *line = strdup(pending.p);
                    memmove(pending.p, nl + 1, pending.n - used);
                    pending.n -= used;
                    if (strspn(line, " \t\r") != strlen(line)) handle_line(line);
                    free(line);
                }
                continue;
            }
            if (!c->used) continue;  /* finished earlier in this same batch */
            if (map[k].what == 2) { finish_cmd(c); continue; }
            if (map[k].what == 3) {
                if (c->in < 0) continue;
                ssize_t w = write(c->in, c->stdin_data + c->stdin_off, c->stdin_len - c->stdin_off > 65536 ? 65536 : c->stdin_len - c->stdin_off);
                if (w > 0) c->stdin_off += (size_t)w;
                if ((w < 0 && errno != EAGAIN) || c->stdin_off >= c->stdin_len) { close(c->in); c->in = -1; }
                continue;
            }
            int *fd = map[k].what == 0 ? &c->out : &c->err;
            if (*fd < 0) continue;
            unsigned char tmp[65536];
            ssize_t got = read(*fd, tmp, sizeof tmp);
            if (got > 0) cap_add(map[k].what == 0 ? &c->o : &c->e, tmp, (size_t)got);
            else if (got == 0 || errno != EAGAIN) { close(*fd); *fd = -1; }
        }
    }
}
